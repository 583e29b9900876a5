"""Joint source/target BPE vocabulary (Sennrich et al., 2016) as a Hugging Face fast tokenizer."""

import hashlib
import json
from collections.abc import Iterable, Iterator
from itertools import islice

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..trust import check_remote_code

PAD = "<pad>"
UNK = "<unk>"
BOS = "<s>"
EOS = "</s>"
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS]  # ids 0, 1, 2, 3: shared with the model config
EOS_ID = SPECIAL_TOKENS.index(EOS)

NORMALIZATIONS = ("NFKC", "NFC", None)
MODEL_MAX_LENGTH = 1024
TRAIN_BATCH_SIZE = 1000
# After Metaspace has turned spaces into "▁": a word (letters, with in-word apostrophes as in "don't"), a
# single digit, or a run of other symbols, each optionally led by its "▁". Every character lands in exactly
# one piece, so decoding (concatenate, "▁" -> " ") restores the text.
WORD_DIGIT_PUNCT = Regex(r"▁?[\p{L}\p{M}]+(?:['’][\p{L}\p{M}]+)*|▁?\p{N}|▁?[^\p{L}\p{M}\p{N}▁]+")


def _normalizer(normalization: str | None, lowercase: bool) -> normalizers.Normalizer:
    """Unicode normalisation, whitespace runs collapsed to one space and trimmed, optional lowercasing."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    steps: list[normalizers.Normalizer] = []
    if normalization == "NFKC":
        steps.append(normalizers.NFKC())
    elif normalization == "NFC":
        steps.append(normalizers.NFC())
    steps += [normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Reversible pre-tokenisation: spaces become "▁", then words, single digits and punctuation are split."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Split(WORD_DIGIT_PUNCT, behavior="isolated"),
        ]
    )


def _batches(texts: Iterable[str], size: int = TRAIN_BATCH_SIZE) -> Iterator[list[str]]:
    """Yield lists of up to `size` texts."""
    iterator = iter(texts)
    while batch := list(islice(iterator, size)):
        yield batch


def _eos_post_processor() -> processors.TemplateProcessing:
    """Append </s> to every sequence (and to each side of a pair)."""
    return processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B:1 {EOS}:1", special_tokens=[(EOS, EOS_ID)]
    )


def train_bpe(
    texts: Iterable[str],
    vocab_size: int = 37000,
    *,
    lowercase: bool = False,
    normalization: str | None = "NFKC",
    min_frequency: int = 2,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train one joint BPE vocabulary on `texts` (source and target sentences together)."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = _normalizer(normalization, lowercase)
    tokenizer.pre_tokenizer = _pre_tokenizer()
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(_batches(texts), trainer=trainer)
    tokenizer.post_processor = _eos_post_processor()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        model_max_length=MODEL_MAX_LENGTH,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path_or_hub_id: str) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with `save_pretrained` from a folder or the Hub, running no code of the folder
    (one that asks to is refused: `trust.check_remote_code`)."""
    check_remote_code(path_or_hub_id)
    return AutoTokenizer.from_pretrained(path_or_hub_id, trust_remote_code=False)


def lowercases(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer lowercases its input (then its model is scored case-insensitively), as its normalizer
    says, or for a Python tokenizer (FSMT's Moses and BPE, of a converted published model) its `do_lower_case`."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return bool(getattr(tokenizer, "do_lower_case", False))
    normalizer = backend.normalizer
    return normalizer is not None and normalizer.normalize_str("A") == "a"


# The parts of a tokenizer.json that decide which ids a text becomes and which text ids become.
FINGERPRINTED_PARTS = ("normalizer", "pre_tokenizer", "model", "decoder")


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """A SHA-256 prefix of what the tokenizer does to text (its normalizer, pre-tokenizer, vocabulary and merges,
    decoder), recorded in the config of a model trained with it; None for a tokenizer that is not a fast one (FSMT's
    Moses and BPE files, checked by `evaluation.verification.check_merges`)."""
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        return None
    saved = json.loads(tokenizer.backend_tokenizer.to_str())
    parts = {name: saved.get(name) for name in FINGERPRINTED_PARTS}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
