"""Corpus loaders, the Tatoeba split, tokenisation with length filtering, and token-budget batching."""

import gzip
import json
import time
from pathlib import Path

import datasets
import numpy as np
import pytest
from datasets import Dataset, Features, Translation
from transformers import PreTrainedTokenizerFast

from vaswani_transformer.data import (
    PAIR_FEATURES,
    TATOEBA_DIR,
    LoadStats,
    TokenBudgetBatchSampler,
    corpora,
    load_hub,
    load_parallel,
    load_tatoeba,
    load_text_pair,
    load_tsv,
    train_test_split_fixed,
    translation_to_parallel,
)
from vaswani_transformer.data.tokenization import train_bpe
from vaswani_transformer.files.reading import read_text_lines

TATOEBA_PAIRS = 169_813


@pytest.fixture(scope="module")
def tatoeba() -> Dataset:
    """The embedded English-German corpus."""
    return load_tatoeba()[0]


@pytest.fixture(scope="module")
def sample(tatoeba: Dataset) -> Dataset:
    """Every 50th Tatoeba pair (short to long: the corpus is sorted by length)."""
    return tatoeba.select(range(0, len(tatoeba), 50))


@pytest.fixture(scope="module")
def tokenizer(sample: Dataset) -> PreTrainedTokenizerFast:
    """A small joint BPE trained on the sample."""
    return train_bpe(sample["source"][:] + sample["target"][:], 1500)


def write_lines(path: Path, lines: list[bytes]) -> Path:
    """Write raw lines (newline-terminated), gzip-compressed if the name ends in .gz."""
    data = b"".join(line + b"\n" for line in lines)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def test_load_text_pair_reads_multi30k_val(shared_data: Path) -> None:
    val = shared_data / "multi30k" / "val"
    ds, stats = load_text_pair(val.with_suffix(".en"), val.with_suffix(".de"))
    assert ds.column_names == ["source", "target"]
    assert (len(ds), stats.read, stats.kept, stats.skipped_empty) == (1014, 1014, 1014, 0)
    assert ds[0] == {
        "source": "A group of men are loading cotton onto a truck",
        "target": "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen",
    }
    assert "1,014" in stats.summary()


def test_load_text_pair_skips_empty_and_undecodable_pairs(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "a.en.gz", [b"Hello.", b"", b"Bad \xff byte.", b"  Good night.\r", b"x"])
    target = write_lines(tmp_path / "a.de", [b"Hallo.", b"Leer.", b"Kaputt.", b"Gute Nacht.", b"   "])
    ds, stats = load_text_pair(source, target)
    assert ds["source"][:] == ["Hello.", "Good night."]
    assert ds["target"][:] == ["Hallo.", "Gute Nacht."]
    assert stats == LoadStats(
        origin=f"{source} + {target}", read=5, kept=2, skipped_empty=2, skipped_undecodable=1
    )


@pytest.mark.parametrize("lines", [0, 1, 6, 7])  # none, fewer than a chunk, whole chunks, a partial last one
def test_files_are_read_in_arrow_chunks_into_the_same_pairs(tmp_path: Path, monkeypatch, lines: int) -> None:
    """Pairs are gathered in Arrow chunks as they are read (a million pairs peaked 2.6 GB through Python
    lists and `Dataset.from_dict`, 0.9 GB now); the dataset is the same pairs, in order, with the pair features."""
    monkeypatch.setattr(corpora, "PAIRS_PER_CHUNK", 3)
    sources = [f"Sentence {i}." for i in range(lines)]
    targets = [f"Satz {i}." for i in range(lines)]
    source = write_lines(tmp_path / "a.en", [text.encode() for text in sources])
    target = write_lines(tmp_path / "a.de", [text.encode() for text in targets])
    tsv = write_lines(
        tmp_path / "a.tsv", [f"{s}\t{t}".encode() for s, t in zip(sources, targets, strict=True)]
    )
    for ds, stats in (load_text_pair(source, target), load_tsv(tsv)):
        assert (ds["source"][:], ds["target"][:], stats.kept) == (sources, targets, lines)
        assert ds.features == PAIR_FEATURES
        assert ds.data.table["source"].num_chunks == max(1, -(-lines // 3))


def test_load_text_pair_rejects_misaligned_files(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "x.en", [b"a", b"b", b"c"])
    target = write_lines(tmp_path / "x.de", [b"a", b"b"])
    with pytest.raises(ValueError, match=r"x\.en has 3 lines, .*x\.de has 2 lines"):
        load_text_pair(source, target)
    with pytest.raises(ValueError, match=r"x\.de has 2 lines, .*x\.en has 3 lines"):
        load_text_pair(target, source)


def test_missing_files_are_named(tmp_path: Path) -> None:
    present = write_lines(tmp_path / "x.en", [b"a"])
    with pytest.raises(FileNotFoundError, match=r"nope\.de: no such file \(expected the target side"):
        load_text_pair(present, tmp_path / "nope.de")
    with pytest.raises(FileNotFoundError, match=r"gone\.tsv: no such file \(expected a tab-separated"):
        load_parallel(str(tmp_path / "gone.tsv"))
    with pytest.raises(FileNotFoundError, match="not a Hub dataset id"):
        load_parallel(str(tmp_path / "no" / "such" / "corpus"))


def test_load_tsv_counts_bad_lines_without_crashing(tmp_path: Path) -> None:
    lines = [
        b"Hi.\tHallo!",
        b"Run!\tLauf!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328 (CM)",
        b"no tab on this line",
        b"",
        b"\tnur Deutsch",
        b"English only\t ",
        b"Broken \xc3\x28 utf-8\tKaputt",
        b"Windows line.\tWindows-Zeile.\r",
    ]
    ds, stats = load_tsv(write_lines(tmp_path / "pairs.tsv.gz", lines))
    assert ds[:] == {"source": ["Hi.", "Windows line."], "target": ["Hallo!", "Windows-Zeile."]}
    # the three-field line is malformed, not a pair whose third field is dropped unseen
    assert (stats.read, stats.kept) == (8, 2)
    assert (stats.skipped_malformed, stats.skipped_empty, stats.skipped_undecodable) == (2, 3, 1)
    assert stats.first_malformed_line == 2 and "2 malformed (the first on line 2)" in stats.summary()
    swapped, _ = load_tsv(tmp_path / "pairs.tsv.gz", source_column=1, target_column=0)
    assert swapped["source"][:] == ds["target"][:]
    third, stats = load_tsv(
        tmp_path / "pairs.tsv.gz", target_column=2
    )  # columns named: lines of three fields
    assert third[:] == {
        "source": ["Run!"],
        "target": ["CC-BY 2.0 (France) Attribution: tatoeba.org #906328 (CM)"],
    }
    assert (stats.kept, stats.skipped_malformed, stats.skipped_empty, stats.skipped_undecodable) == (
        1,
        5,
        1,
        1,
    )
    assert stats.first_malformed_line == 1


@pytest.mark.parametrize("gzipped", [False, True])
def test_old_mac_line_endings_are_named_and_windows_ones_read(tmp_path: Path, gzipped: bool) -> None:
    r"""A corpus with "\r"-only line endings is named (it was one overlong line: "raise --max_length")."""
    suffix = ".gz" if gzipped else ""
    mac = tmp_path / f"mac.tsv{suffix}"
    content = b"Hi.\tHallo!\rRun!\tLauf!\r"
    mac.write_bytes(gzip.compress(content) if gzipped else content)
    with pytest.raises(
        ValueError, match=r"mac\.tsv(\.gz)? uses \\r \(old Mac\) line endings: convert them to \\n"
    ):
        load_tsv(mac)
    source, target = tmp_path / "mac.en", tmp_path / "mac.de"
    source.write_bytes(b"Hi.\rRun!\r")
    target.write_bytes(b"Hallo!\nLauf!\n")
    with pytest.raises(ValueError, match=r"mac\.en uses \\r \(old Mac\) line endings"):
        load_text_pair(source, target)
    with pytest.raises(ValueError, match=r"mac\.en uses \\r"):
        read_text_lines(source)
    windows = tmp_path / f"windows.tsv{suffix}"
    content = b"Hi.\tHallo!\r\nRun!\tLauf!\r\n"
    windows.write_bytes(gzip.compress(content) if gzipped else content)
    assert load_tsv(windows)[0][:] == {"source": ["Hi.", "Run!"], "target": ["Hallo!", "Lauf!"]}
    target.write_bytes(b"Hallo!\r\nLauf!\r\n")
    assert read_text_lines(target) == ["Hallo!", "Lauf!"]


def test_load_parallel_dispatches_on_arguments(tmp_path: Path) -> None:
    tsv = write_lines(tmp_path / "pairs.txt", [b"One.\tEins.", b"Two.\tZwei."])
    ds, stats = load_parallel(str(tsv))
    assert (ds["target"][:], stats.origin) == (["Eins.", "Zwei."], str(tsv))
    source = write_lines(tmp_path / "side.en", [b"One."])
    target = write_lines(tmp_path / "side.de", [b"Eins."])
    ds, stats = load_parallel(str(source), str(target))
    assert (ds[0], stats.kept) == ({"source": "One.", "target": "Eins."}, 1)


def test_load_hub_and_load_parallel_on_a_local_dataset_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    folder = tmp_path / "corpus"
    folder.mkdir()
    rows = [{"translation": {"de": "Guten Tag.", "en": "Good day."}}, {"translation": {"de": "", "en": "?"}}]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(row) for row in rows), encoding="utf-8")
    ds, stats = load_hub(str(folder), None, "train", "de", "en")
    assert ds[:] == {"source": ["Guten Tag."], "target": ["Good day."]}
    assert (stats.read, stats.kept, stats.skipped_empty) == (2, 1, 1)
    assert stats.origin.startswith(str(folder))
    ds, _ = load_parallel(str(folder), source_lang="en", target_lang="de")
    assert ds[0] == {"source": "Good day.", "target": "Guten Tag."}


@pytest.mark.parametrize("typed", [True, False])
def test_translation_to_parallel(typed: bool) -> None:
    rows = {
        "translation": [
            {"en": " Good morning. ", "de": "Guten Morgen."},
            {"en": "Nothing on the other side.", "de": "  "},
            {"en": "Thanks!", "de": "Danke!"},
        ]
    }
    features = Features({"translation": Translation(languages=["de", "en"])}) if typed else None
    ds = Dataset.from_dict(rows, features=features)
    pairs, stats = translation_to_parallel(ds, "en", "de")
    assert pairs[:] == {"source": ["Good morning.", "Thanks!"], "target": ["Guten Morgen.", "Danke!"]}
    assert (stats.read, stats.kept, stats.skipped_empty) == (3, 2, 1)
    reverse, _ = translation_to_parallel(ds, "de", "en")
    assert reverse["source"][:] == ["Guten Morgen.", "Danke!"]
    with pytest.raises(ValueError, match="'fr' not in the translation column"):
        translation_to_parallel(ds, "en", "fr")


def test_translation_to_parallel_needs_a_translation_column() -> None:
    with pytest.raises(ValueError, match=r"found columns \['en', 'de'\]"):
        translation_to_parallel(Dataset.from_dict({"en": ["a"], "de": ["b"]}), "en", "de")


def test_tatoeba_is_embedded_with_its_credit(tatoeba: Dataset) -> None:
    assert len(tatoeba) == TATOEBA_PAIRS
    assert tatoeba[0] == {"source": "Hi.", "target": "Hallo!"}
    assert tatoeba[1] == {"source": "Hi.", "target": "Grüß Gott!"}
    assert "Attribution: www.manythings.org/anki and tatoeba.org" in (TATOEBA_DIR / "_about.txt").read_text()
    credit = (TATOEBA_DIR / "CREDIT.md").read_text()
    assert "tatoeba.org" in credit and "manythings.org/anki" in credit and "CC-BY 2.0" in credit


def test_split_keeps_each_source_sentence_in_one_split(tatoeba: Dataset) -> None:
    split = train_test_split_fixed(tatoeba, test_size=3000, seed=0)
    train, test = split["train"], split["test"]
    assert (len(train), len(test)) == (TATOEBA_PAIRS - 3000, 3000)
    test_sources = set(test["source"][:])
    assert test_sources.isdisjoint(train["source"][:])
    assert len(test_sources) < 3000  # sources with several translations stay together, all in test
    pairs = {(s, t) for s, t in zip(tatoeba["source"][:], tatoeba["target"][:], strict=True)}
    assert {(s, t) for s, t in zip(test["source"][:], test["target"][:], strict=True)} <= pairs
    assert train_test_split_fixed(tatoeba, 3000, seed=0)["test"][:] == test[:]
    assert set(train_test_split_fixed(tatoeba, 3000, seed=1)["test"]["source"][:]) != test_sources


def test_split_groups_sources_across_arrow_chunks() -> None:
    parts = [
        Dataset.from_dict({"source": ["a", "b", "a"], "target": ["1", "2", "3"]}),
        Dataset.from_dict({"source": ["c", "a", "b"], "target": ["4", "5", "6"]}),
    ]
    ds = datasets.concatenate_datasets(parts)
    for seed in range(5):
        split = train_test_split_fixed(ds, 2, seed)
        assert set(split["test"]["source"][:]).isdisjoint(split["train"]["source"][:])
        assert len(split["test"]) in (1, 2)  # groups: a x3, b x2, c x1; never more than asked for
        assert len(split["train"]) + len(split["test"]) == 6


def test_split_rejects_impossible_sizes(sample: Dataset) -> None:
    with pytest.raises(ValueError, match="test_size"):
        train_test_split_fixed(sample, len(sample))


def batches_of(sampler: TokenBudgetBatchSampler) -> list[list[int]]:
    """One epoch of batches."""
    return list(sampler)


def assert_within_budget(batches: list[list[int]], longest: np.ndarray, max_tokens: int) -> None:
    """Every batch of two or more examples fits the padded-token budget."""
    over = [b for b in batches if len(b) > 1 and len(b) * longest[b].max() > max_tokens]
    assert over == []


@pytest.fixture(scope="module")
def lengths() -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths of 20,000 examples, correlated like real sentence pairs."""
    rng = np.random.default_rng(123)
    src = rng.integers(2, 120, 20_000)
    return src, np.clip(src + rng.integers(-10, 11, src.size), 2, None)


def test_sampler_respects_budget_and_serves_each_index_once(lengths: tuple[np.ndarray, np.ndarray]) -> None:
    src, tgt = lengths
    sampler = TokenBudgetBatchSampler(src, tgt, max_tokens=2000)
    batches = batches_of(sampler)
    assert len(sampler) == len(batches)
    assert sorted(i for batch in batches for i in batch) == list(range(src.size))
    assert_within_budget(batches, np.maximum(src, tgt), 2000)
    padded = sum(len(b) * np.maximum(src, tgt)[b].max() for b in batches)
    assert padded > 0.9 * len(batches) * 2000  # batches are nearly full
    real = sum(np.maximum(src, tgt)[b].sum() for b in batches)
    assert real > 0.95 * padded  # sorting by length keeps padding small


def test_sampler_shuffles_per_epoch_deterministically(lengths: tuple[np.ndarray, np.ndarray]) -> None:
    src, tgt = lengths
    sampler = TokenBudgetBatchSampler(src, tgt, 2000, seed=7)
    epoch0 = batches_of(sampler)
    sampler.set_epoch(1)
    epoch1 = batches_of(sampler)
    assert epoch0 != epoch1
    assert sorted(i for b in epoch1 for i in b) == list(range(src.size))
    assert len(sampler) == len(epoch1)
    again = TokenBudgetBatchSampler(src, tgt, 2000, seed=7)
    assert batches_of(again) == epoch0
    again.set_epoch(1)
    assert batches_of(again) == epoch1
    assert batches_of(TokenBudgetBatchSampler(src, tgt, 2000, seed=8)) != epoch0
    longest = [int(np.maximum(src, tgt)[b].max()) for b in epoch0]
    descents = sum(a > b for a, b in zip(longest, longest[1:], strict=False))
    assert descents > len(longest) // 4  # batch order is shuffled, not sorted by length


def test_sampler_without_shuffle_is_sorted_by_length(lengths: tuple[np.ndarray, np.ndarray]) -> None:
    src, tgt = lengths
    sampler = TokenBudgetBatchSampler(src, tgt, 2000, shuffle=False)
    order = [i for batch in batches_of(sampler) for i in batch]
    assert np.all(np.diff(np.maximum(src, tgt)[order]) >= 0)
    sampler.set_epoch(3)
    assert [i for batch in batches_of(sampler) for i in batch] == order


def test_sampler_gives_an_oversize_example_its_own_batch() -> None:
    src = [5, 3000, 6, 7, 4, 8]
    tgt = [5, 10, 6, 2500, 4, 9]
    sampler = TokenBudgetBatchSampler(src, tgt, max_tokens=100)
    batches = batches_of(sampler)
    assert [1] in batches and [3] in batches
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert len(sampler) == len(batches) == 3
    assert batches_of(TokenBudgetBatchSampler([], [], 100)) == []
    with pytest.raises(ValueError, match="source"):
        TokenBudgetBatchSampler([1, 2], [1], 100)


def test_sampler_is_fast_for_a_large_corpus() -> None:
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(2, 80, 170_000), rng.integers(2, 80, 170_000)
    start = time.perf_counter()
    sampler = TokenBudgetBatchSampler(src, tgt, 25_000)
    n_batches = len(sampler)
    assert time.perf_counter() - start < 1.0
    assert n_batches >= int(np.maximum(src, tgt).sum() / 25_000)
