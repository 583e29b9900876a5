"""What `translate` and the `vaswani-translation` pipeline take, checked before any decoding: generate()'s counts
and lengths, sources cut to the model's positions, blank sources; and what users of transformers 4's translation
pipeline bring: its options that make sense for one language pair (`return_text`, `return_tensors`,
`clean_up_tokenization_spaces`, `truncation`, `src_lang`/`tgt_lang`, checked against the pair the model records)
and any iterable of strings (a datasets `Column`, a tuple, a map object). Shipped as remote code beside the
pipeline: it imports only torch and transformers.
"""

import logging
import types
from collections.abc import Iterable, Mapping, Sequence, Sized
from typing import Any

import torch
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


# generate()'s counts that must be at least one, and lengths that must not be negative
AT_LEAST_ONE = ("num_beams", "num_return_sequences")
NOT_NEGATIVE = ("max_length", "max_new_tokens", "min_length", "min_new_tokens")


def check_generate_arguments(generate_kwargs: dict[str, Any]) -> None:
    """Refuse (ValueError, naming the argument) a count below one or a negative length, before any decoding:
    inside the search they fail far from the call (num_beams=0 divides by zero)."""
    for name, lowest in [(name, 1) for name in AT_LEAST_ONE] + [(name, 0) for name in NOT_NEGATIVE]:
        value = generate_kwargs.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < lowest):
            raise ValueError(f"{name} must be a whole number of at least {lowest}, got {value!r}.")


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


def output_options(
    return_text: bool | None, return_tensors: bool | None, clean_up_tokenization_spaces: bool | None
) -> dict[str, Any]:
    """The postprocess options: text unless only the token ids are asked for (`return_tensors=True`, as in
    transformers 4), the ids with `return_tensors`; a ValueError when neither is asked for."""
    text = not return_tensors if return_text is None else return_text
    if not text and not return_tensors:
        raise ValueError(
            "return_text=False without return_tensors=True leaves nothing to return: ask for one."
        )
    options: dict[str, Any] = {"return_text": text, "return_tensors": bool(return_tensors)}
    if clean_up_tokenization_spaces is not None:
        options["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
    return options


def as_pipeline_inputs(inputs: Any) -> Any:
    """`inputs` as transformers' pipelines take them: a string, a list, a generator or a torch Dataset (such as
    `KeyDataset`) as it is; any other sized iterable of strings (a datasets
    `Column`, a tuple) as a list, whose results come as a list; any other iterator as a generator, translated as
    it is read."""
    if isinstance(inputs, str | bytes | list | Mapping | types.GeneratorType | torch.utils.data.Dataset):
        return inputs
    if isinstance(inputs, Sized) and isinstance(inputs, Iterable):
        return list(inputs)
    if isinstance(inputs, Iterable):
        return (item for item in inputs)
    return inputs


def translation_results(
    tokenizer: PreTrainedTokenizerBase,
    output_ids: torch.Tensor,
    return_text: bool = True,
    return_tensors: bool = False,
    **decoding: Any,
) -> dict[str, Any] | list[dict[str, Any]]:
    """One sentence's result from its outputs' ids (one row per returned sequence): its text and (`return_tensors`)
    its token ids, as transformers 4's translation pipeline gave them; a list when there are several."""
    results: list[dict[str, Any]] = []
    for ids in output_ids:
        result: dict[str, Any] = {"translation_token_ids": ids} if return_tensors else {}
        if return_text:
            result["translation_text"] = tokenizer.decode(ids, skip_special_tokens=True, **decoding).strip()
        results.append(result)
    return results if len(results) > 1 else results[0]
