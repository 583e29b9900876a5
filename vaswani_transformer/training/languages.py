"""A run's language pair, from what the data says, never from a silent default.

The pair is --source_lang and --target_lang where they are given (a recipe that knows its corpus gives them too);
else the corpus files' suffixes (`train.fr` and `train.en`: French→English), the same for every split that has
them; else the embedded Tatoeba corpus's English→German. A Hub dataset's configuration ("de-en") names the two
languages but not the direction, so there it is only checked against. Flags that contradict the suffixes, suffixes
that contradict each other, or data that says nothing are refused before any work, naming the flags to give.
"""

import re
from pathlib import Path

EMBEDDED_PAIR = ("en", "de")  # the embedded Tatoeba corpus: English sources, German targets
# A language code as corpus files end in it: ISO 639-1 or 639-3, with an optional region or script (pt_BR, zh-Hans)
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}([-_][A-Za-z]{2,4})?")
# File suffixes of two or three letters that name a kind of file, not a language
NOT_LANGUAGES = frozenset(
    {"txt", "tsv", "csv", "src", "tgt", "tok", "raw", "bpe", "out", "log", "dat", "xml", "sgm", "lc", "gz", "xz",
     "bz2", "zst", "json", "md"}
)  # fmt: skip
COMPRESSIONS = (".gz", ".xz", ".bz2", ".zst")
# The splits' file flags, source and target
SPLITS = (("train_source", "train_target"), ("dev_source", "dev_target"), ("test_source", "test_target"))


def suffix_language(path: str | None) -> str | None:
    """The language code a corpus file's name ends in (`train.fr`, `train.fr.gz`); None where it ends in none."""
    if path is None:
        return None
    name = Path(path).name
    for compression in COMPRESSIONS:
        name = name.removesuffix(compression)
    suffix = Path(name).suffix.removeprefix(".")
    return suffix if LANGUAGE_CODE.fullmatch(suffix) and suffix not in NOT_LANGUAGES else None


def suffix_pairs(files: dict[str, str | None]) -> dict[str, tuple[str, str]]:
    """Each split's pair as its text files' suffixes name it ("train_source" → ("fr", "en")), for the splits whose
    two files both end in a language code, different ones."""
    pairs = {}
    for source_flag, target_flag in SPLITS:
        source, target = suffix_language(files.get(source_flag)), suffix_language(files.get(target_flag))
        if source is not None and target is not None and source != target:
            pairs[source_flag] = (source, target)
    return pairs


def corpus_languages(
    files: dict[str, str | None], hub_config: str | None, source_lang: str | None, target_lang: str | None
) -> tuple[str, str]:
    """The run's (source, target) languages from the flags given (`source_lang`, `target_lang`; None: not given)
    and the corpus (`files`: each split's flag and file, "train_source" → "train.fr"); ValueError naming the flags
    where they contradict the data or nothing tells."""
    pairs = suffix_pairs(files)
    if len(set(pairs.values())) > 1:
        named = "; ".join(f"--{flag} {files[flag]}: {s}→{t}" for flag, (s, t) in pairs.items())
        raise ValueError(
            f"the corpus files' suffixes name different language pairs ({named}): rename the files."
        )
    data = next(iter(pairs.values()), None)
    evidence = next((f"the suffixes of --{flag} {files[flag]}" for flag in pairs), None)
    if data is None and files.get("train_source") is None:
        data, evidence = EMBEDDED_PAIR, "the embedded Tatoeba corpus (English→German)"
    given = (source_lang, target_lang)
    if data is not None:
        for flag, value, from_data in zip(("--source_lang", "--target_lang"), given, data, strict=True):
            if value is not None and value != from_data:
                raise ValueError(
                    f"{flag} {value} contradicts {evidence}, which say {data[0]}→{data[1]}: give "
                    f"{flag} {from_data}, or leave the language flags out."
                )
        _check_hub_config(hub_config, data)
        return data
    if source_lang is None or target_lang is None:
        corpus = files.get("train_source")
        raise ValueError(
            f"the language pair of --train_source {corpus} is unknown: its files' names do not end in language "
            "codes (train.fr, train.en). Give --source_lang and --target_lang (e.g. --source_lang fr "
            "--target_lang en)."
        )
    _check_hub_config(hub_config, (source_lang, target_lang))
    return source_lang, target_lang


def _check_hub_config(hub_config: str | None, pair: tuple[str, str]) -> None:
    """A Hub configuration named as a pair ("de-en") must hold the run's two languages."""
    if hub_config is None or hub_config.count("-") != 1:
        return
    named = set(hub_config.split("-"))
    if named != set(pair) and all(LANGUAGE_CODE.fullmatch(code) for code in named):
        raise ValueError(
            f"--hub_config {hub_config} names the languages {' and '.join(sorted(named))}, not the run's "
            f"{pair[0]}→{pair[1]}: give --source_lang and --target_lang of the configuration's languages."
        )
