"""Prepared training data: the joint BPE and the tokenised pairs, made once per corpus content and
settings in a shared cache, reused by every run folder; changed content or settings prepare anew."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from datasets import Dataset, concatenate_datasets

from tests.conftest import LANGUAGES, tatoeba_files
from vaswani_transformer.data import corpora, load_text_pair, load_tsv
from vaswani_transformer.data.prepared import (
    TextDigest,
    arrow_batches,
    bpe_sample,
    build_once,
    content_digest,
    prepared_folder,
    texts_for_bpe,
)
from vaswani_transformer.training import TrainOptions, job_data, train_and_evaluate

TINY = {"d_model": 32, "d_ff": 64, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1}


def pairs(sources: list[str], targets: list[str]) -> Dataset:
    return Dataset.from_dict({"source": sources, "target": targets})


def test_the_digest_is_of_the_texts_in_order_and_their_boundaries() -> None:
    base = content_digest(pairs(["ab", "c"], ["x", "y"]))
    assert base == content_digest(pairs(["ab", "c"], ["x", "y"]))
    assert base == content_digest(pairs(["zz", "ab", "c"], ["q", "x", "y"]).select([1, 2]))  # a selection
    chunked = concatenate_datasets([pairs(["ab"], ["x"]), pairs(["c"], ["y"])])
    assert len(chunked.data.to_batches()) == 2 and content_digest(chunked) == base  # however it is chunked
    for other in (
        pairs(["a", "bc"], ["x", "y"]),  # same bytes, other boundaries
        pairs(["c", "ab"], ["y", "x"]),  # other order
        pairs(["ab", "d"], ["x", "y"]),  # one byte
        pairs(["x", "y"], ["ab", "c"]),  # sides swapped
    ):
        assert content_digest(other) != base


def test_a_selection_is_read_a_batch_at_a_time_not_a_row_at_a_time() -> None:
    """A selection's batches (any order, a selection of a selection) hold its rows in a few Arrow chunks, not one
    per row (which cost the digest a Python call per row), and its digest is that of the same texts built anew."""
    corpus = concatenate_datasets(
        [
            pairs([f"s{i}" for i in range(start, start + 60)], [f"t{i}" for i in range(start, start + 60)])
            for start in (0, 60)
        ]
    )
    for selection in (
        corpus.select(range(119, -1, -1)),
        corpus.shuffle(seed=0).select(range(100)),
        corpus.select(range(0, 120, 2)).select([5, 3, 40, 41, 7]),
    ):
        batches = list(arrow_batches(selection, ["target", "source"], 50))
        assert [batch.num_rows for batch in batches] == [50] * (len(selection) // 50) + [
            len(selection) % 50
        ] * (len(selection) % 50 > 0)
        assert (
            pa.concat_tables(batches).to_pydict() == selection.select_columns(["target", "source"]).to_dict()
        )
        assert all(column.num_chunks <= 2 for batch in batches for column in batch.columns)
        assert content_digest(selection) == content_digest(pairs(selection["source"], selection["target"]))


def test_the_bpe_sample_is_seeded_in_corpus_order_and_whole_below_the_cap() -> None:
    corpus = pairs([f"s{i}" for i in range(100)], [f"t{i}" for i in range(100)])
    assert bpe_sample(corpus, 0, seed=0) is corpus and bpe_sample(corpus, 100, seed=0) is corpus
    sample = bpe_sample(corpus, 30, seed=1)
    indices = [int(text[1:]) for text in sample["source"]]
    assert len(indices) == 30 and indices == sorted(indices)
    assert (
        sample["source"]
        == bpe_sample(corpus, 30, seed=1)["source"]
        != bpe_sample(corpus, 30, seed=2)["source"]
    )


def test_a_failed_build_leaves_nothing_that_looks_prepared(tmp_path: Path) -> None:
    folder = prepared_folder(tmp_path, "bpe", "digest", 100)

    def fails(partial: Path) -> None:
        partial.mkdir()
        (partial / "half.json").write_text("{")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        build_once(folder, fails)
    assert [path.name for path in tmp_path.iterdir() if not path.name.endswith(".lock")] == []
    build_once(folder, lambda partial: partial.mkdir())
    assert folder.is_dir()


CONCURRENT = """
import sys, time
from pathlib import Path
from vaswani_transformer.data.prepared import build_once

def build(partial: Path) -> None:
    partial.mkdir()
    time.sleep(1.5)  # long enough for the other process to arrive and wait
    (partial / "built-by").write_text(sys.argv[2])

build_once(Path(sys.argv[1]), build)
print((Path(sys.argv[1]) / "built-by").read_text())
"""


@pytest.mark.slow
def test_two_processes_preparing_the_same_data_build_it_once(tmp_path: Path) -> None:
    folder = tmp_path / "bpe-key"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT, str(folder), name], stdout=subprocess.PIPE, text=True
        )
        for name in ("first", "second")
    ]
    outputs = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert len(set(outputs)) == 1 and outputs[0] in ("first", "second")  # one built it, both read that one
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bpe-key", "bpe-key.lock"]


def job(tmp_path: Path, **overrides: object) -> TrainOptions:
    """A one-step run on the corpus files in tmp_path (written by the first call, then left as they are)."""
    files = {
        f"{split}_{side}": str(tmp_path / f"{split}.{LANGUAGES[side]}")
        for split in ("train", "test")
        for side in ("source", "target")
    }
    if not (tmp_path / f"train.{LANGUAGES['source']}").exists():
        files = tatoeba_files(tmp_path, 120)
    settings = {
        **files, "config_overrides": TINY, "vocab_size": 300, "max_tokens": 512,
        "max_steps": 1, "warmup_steps": 1, "save_steps": 1, "average_last": 1, "num_beams": 1, "examples": [],
        "data_cache": tmp_path / "cache",
    }  # fmt: skip
    return TrainOptions(**{**settings, **overrides})


def corpus_lines(count: int) -> tuple[bytes, bytes]:
    """`count` aligned lines with an empty pair and an undecodable one among them, as real corpora have."""
    sources = [f"A sentence number {i} .".encode() for i in range(count)]
    targets = [f"Satz Nummer {i} .".encode() for i in range(count)]
    sources[3], targets[7] = b"   ", b"caf\xe9"
    return b"\n".join(sources) + b"\n", b"\n".join(targets) + b"\n"


def test_corpus_files_are_read_once_into_the_cache_then_mapped(tmp_path: Path, monkeypatch) -> None:
    """The same pairs and counts as a plain read; a second load reads nothing; a touched file, or one of the same
    size and time whose first byte changed, is read again; a failed read leaves nothing behind."""
    source, target = tmp_path / "train.en", tmp_path / "train.de"
    for path, lines in zip((source, target), corpus_lines(250), strict=True):
        path.write_bytes(lines)
    monkeypatch.setattr(corpora, "PAIRS_PER_CHUNK", 40)  # several chunks written to the stream
    expected, expected_stats = load_text_pair(source, target)
    cache = tmp_path / "cache"
    first, stats = load_text_pair(source, target, cache)
    assert first.to_dict() == expected.to_dict() and stats == expected_stats
    assert stats.skipped_empty == stats.skipped_undecodable == 1
    mapped_from = [Path(file["filename"]).parent.parent for file in first.cache_files]
    assert mapped_from == [cache]  # mapped, not copied
    digest = content_digest(Dataset.from_dict(expected.to_dict()))
    assert content_digest(expected) == content_digest(first) == digest  # as computed from the texts

    reads = []
    real_aligned_lines = corpora._aligned_lines
    monkeypatch.setattr(
        corpora, "_aligned_lines", lambda *paths: reads.append(paths) or real_aligned_lines(*paths)
    )
    again, again_stats = load_text_pair(source, target, cache)
    assert again.to_dict() == expected.to_dict() and again_stats == expected_stats and reads == []
    with monkeypatch.context() as no_hashing:  # the digest was recorded as the text was read: no pass over it
        no_hashing.setattr(TextDigest, "update", lambda *args: pytest.fail("the text was hashed again"))
        assert content_digest(again) == digest

    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))  # touched
    assert load_text_pair(source, target, cache)[0].to_dict() == expected.to_dict() and len(reads) == 1
    times = source.stat().st_atime_ns, source.stat().st_mtime_ns
    source.write_bytes(b"B" + source.read_bytes()[1:])  # same size, and the time put back
    os.utime(source, ns=times)
    changed = load_text_pair(source, target, cache)[0]
    assert len(reads) == 2 and changed["source"][0] == "B" + expected["source"][0][1:]

    target.write_bytes(target.read_bytes() + b"one line more\n")
    with pytest.raises(ValueError, match="line counts differ"):
        load_text_pair(source, target, cache)
    assert len([path for path in cache.iterdir() if path.is_dir()]) == 3  # the failed read left no folder


def test_a_tsv_corpus_is_read_once_per_choice_of_columns(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"id{i}\tHello {i}.\tHallo {i}.\n" for i in range(30)) + "broken line\n")
    cache = tmp_path / "cache"
    for columns in ((1, 2), (2, 1)):
        expected = load_tsv(path, *columns)
        loaded = load_tsv(path, *columns, cache=cache)
        assert loaded[0].to_dict() == expected[0].to_dict() and loaded[1] == expected[1]
        assert loaded[1].skipped_malformed == 1
    assert len([path for path in cache.glob("text-*") if path.is_dir()]) == 2


@pytest.mark.slow
def test_a_new_run_folder_reuses_the_prepared_data_and_changes_prepare_anew(
    tmp_path: Path, monkeypatch
) -> None:
    first = job(tmp_path, output_dir=tmp_path / "first")
    train_and_evaluate(first)
    prepared = sorted(path.name for path in (tmp_path / "cache").iterdir() if path.is_dir())
    assert [name.split("-")[0] for name in prepared] == ["bpe", "text", "tokenized"]
    tokenizer = (tmp_path / "first" / "tokenizer" / "tokenizer.json").read_text()

    def no_more_preparing(*args: object, **kwargs: object) -> None:
        pytest.fail("prepared again")

    monkeypatch.setattr(job_data, "train_bpe", no_more_preparing)
    monkeypatch.setattr(job_data, "write_tokenized", no_more_preparing)
    source = Path(first.train_source)
    os.utime(source, (time.time() + 60, time.time() + 60))  # touched, same content
    train_and_evaluate(job(tmp_path, output_dir=tmp_path / "second"))
    assert (tmp_path / "second" / "tokenizer" / "tokenizer.json").read_text() == tokenizer
    monkeypatch.undo()

    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    source.write_text(
        "".join(line.replace("\n", "!\n") for line in lines), encoding="utf-8"
    )  # training pairs too
    train_and_evaluate(job(tmp_path, output_dir=tmp_path / "changed"))
    train_and_evaluate(job(tmp_path, output_dir=tmp_path / "lowercased", lowercase=True))
    train_and_evaluate(job(tmp_path, output_dir=tmp_path / "longer", max_length=40))
    kinds = [path.name.split("-")[0] for path in (tmp_path / "cache").iterdir() if path.is_dir()]
    # the changed byte and lowercasing: a BPE and tokenised pairs each; max_length: tokenised pairs only; the
    # text read again when touched (same pairs: nothing prepared again) and when changed
    assert sorted(kinds) == ["bpe"] * 3 + ["text"] * 3 + ["tokenized"] * 4
    scores = json.loads((tmp_path / "longer" / "final" / "scores.json").read_text())
    assert scores["num_sentences"] == 5


def test_vaswani_prepare_fills_the_cache_that_training_then_starts_from(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """`vaswani-prepare` takes the training flags, prepares into the data cache without touching --output_dir,
    and a training with the same data and settings prepares nothing."""
    from vaswani_transformer.cli import prepare

    options = job(tmp_path, output_dir=tmp_path / "run")
    flags = ["--train_source", options.train_source, "--train_target", options.train_target]
    flags += ["--test_source", options.test_source, "--test_target", options.test_target]
    for name in ("vocab_size", "dev_size", "max_length", "bpe_max_pairs", "seed", "lowercase", "data_cache"):
        flags += [
            f"--{name}",
            str(getattr(options, name)),
        ]  # over the default recipe's: the job's data settings
    flags += ["--eval_steps", "0", "--output_dir", str(tmp_path / "run")]
    assert prepare.main(flags) == 0
    assert f"prepared in {tmp_path / 'cache'}: joint BPE of" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()
    monkeypatch.setattr(job_data, "train_bpe", lambda *args, **kwargs: pytest.fail("prepared again"))
    monkeypatch.setattr(job_data, "write_tokenized", lambda *args, **kwargs: pytest.fail("prepared again"))
    train_and_evaluate(options)
    assert (tmp_path / "run" / "final" / "scores.json").is_file()
    assert prepare.main([*flags, "--bpe_max_pairs", "-1"]) == 2


def test_a_cached_corpus_is_read_from_its_file_not_through_the_mapping(tmp_path: Path, monkeypatch) -> None:
    """The whole corpus and in-order selections of it (the BPE sample) are read with plain reads of the cache file,
    in batches across its record batches, giving the Dataset's own rows; other selections read the Dataset."""
    source, target = tmp_path / "train.en", tmp_path / "train.de"
    for path, lines in zip((source, target), corpus_lines(250), strict=True):
        path.write_bytes(lines)
    monkeypatch.setattr(corpora, "PAIRS_PER_CHUNK", 40)  # several record batches in the file
    corpus, _ = load_text_pair(source, target, tmp_path / "cache")
    opened: list[str] = []
    os_file = pa.OSFile
    monkeypatch.setattr(pa, "OSFile", lambda path, *args: (opened.append(path), os_file(path, *args))[1])
    sample = bpe_sample(corpus, 100, seed=3)
    for dataset, from_file in (
        (corpus, True),
        (sample, True),
        (corpus.select(range(len(corpus))[::-1]), False),
    ):
        opened.clear()
        batches = list(arrow_batches(dataset, ["target", "source"], 32))
        assert max(batch.num_rows for batch in batches) <= 32
        assert pa.concat_tables(batches).to_pydict() == dataset.select_columns(["target", "source"]).to_dict()
        assert bool(opened) == from_file
    assert list(texts_for_bpe(sample)) == list(sample["source"]) + list(sample["target"])
