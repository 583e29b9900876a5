"""What `translate()` and the package's pipeline check in their sources before any decoding: sources cut to the
model's positions, blank sources, and `src_lang`/`tgt_lang` (transformers 4's translation-pipeline options)
against the pair the model records.
"""

import logging
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


def cap_source_lengths(encodings: list[list[int]], limit: int) -> list[list[int]]:
    """Sources cut to `limit` tokens (the model's position table), keeping their final EOS; the cut ones are
    counted in a warning. An unbounded source makes decoding's memory and time unbounded too (a 200,000-character
    line asked for 102 GB)."""
    cut = [ids[: limit - 1] + ids[-1:] if len(ids) > limit else ids for ids in encodings]
    if count := sum(len(ids) > limit for ids in encodings):
        logger.warning(f"{count:,} source sentence(s) longer than {limit:,} tokens were cut to {limit:,}.")
    return cut


def has_words(ids: Sequence[int], tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether a source holds more than the tokens the tokenizer adds (the end of sentence): a blank source
    translates to an empty string, not to whatever the model makes of an empty sentence."""
    return len(ids) > tokenizer.num_special_tokens_to_add()


def _language(code: str) -> str:
    """The language of a code, without its region or script ("de_DE", "de-AT" and "de" are all German)."""
    return code.replace("-", "_").split("_")[0].lower()


def check_languages(pair: tuple[str, str] | None, src_lang: str | None, tgt_lang: str | None) -> None:
    """A ValueError naming the model's pair when `src_lang` or `tgt_lang` asks for another; a model that records
    no pair takes them unchecked."""
    if pair is None:
        return
    for name, asked, own in (("src_lang", src_lang, pair[0]), ("tgt_lang", tgt_lang, pair[1])):
        if asked is not None and _language(asked) != _language(own):
            raise ValueError(
                f"{name}={asked!r}, but this model translates {pair[0]} to {pair[1]} only: give {name}={own!r} "
                f"or leave it out (a model of this family translates one language pair)."
            )
