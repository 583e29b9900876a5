"""Prepared-data cache entries prove themselves before reuse: a truncated or altered file, or an entry
without a manifest, is found and prepared anew with a warning naming the file; temporary folders of processes
that died are removed, those of live ones stay."""

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import tatoeba_files
from vaswani_transformer.cli import prepare
from vaswani_transformer.data.prepared import build_once, prepared_entry
from vaswani_transformer.files import manifests
from vaswani_transformer.files.manifests import MANIFEST, manifest_problem


def prepare_flags(tmp_path: Path) -> list[str]:
    """vaswani-prepare on a small corpus into tmp_path/cache."""
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    flags = [item for name, path in tatoeba_files(corpus, 120).items() for item in (f"--{name}", path)]
    return [
        *flags,
        "--vocab_size",
        "300",
        "--dev_size",
        "0",
        "--eval_steps",
        "0",
        "--data_cache",
        str(tmp_path / "cache"),
    ]


def run_prepare(flags: list[str], caplog) -> str:
    """vaswani-prepare's log (its status must be 0)."""
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert prepare.main(flags) == 0
    return caplog.text


def tokenized_entry(cache: Path) -> Path:
    (entry,) = [path for path in cache.glob("tokenized-*") if path.is_dir()]
    return entry


def flip_two_bytes(path: Path) -> None:
    content = bytearray(path.read_bytes())
    content[0] ^= 0xFF
    content[-1] ^= 0xFF
    path.write_bytes(bytes(content))


def test_a_damaged_tokenised_entry_is_prepared_anew_with_a_warning_naming_the_file(tmp_path, caplog) -> None:
    flags = prepare_flags(tmp_path)
    run_prepare(flags, caplog)
    entry = tokenized_entry(tmp_path / "cache")
    whole = {path.name: path.read_bytes() for path in entry.iterdir()}
    assert "tokenised pairs: reused" in run_prepare(flags, caplog)  # a whole entry is reused

    damages = {
        "source.bin": lambda path: path.write_bytes(path.read_bytes()[:-3]),  # truncated
        "target.bin": flip_two_bytes,  # same size, other content
        MANIFEST: lambda path: path.unlink(),  # an unfinished entry
        "filter_stats.json": lambda path: path.write_text("{"),
    }
    for name, damage in damages.items():
        damage(entry / name)
        log = run_prepare(flags, caplog)
        assert f"warning: {entry / name}" in log and f"rebuilding {entry}" in log, name
        assert "tokenised pairs: reused" not in log
        assert {path.name: path.read_bytes() for path in entry.iterdir()} == whole  # prepared anew, as before
    assert not [path for path in (tmp_path / "cache").iterdir() if ".partial-" in path.name]


def test_large_files_are_hashed_only_with_verify_cache(tmp_path, caplog, monkeypatch) -> None:
    flags = prepare_flags(tmp_path)
    run_prepare(flags, caplog)
    target = tokenized_entry(tmp_path / "cache") / "target.bin"
    monkeypatch.setattr(manifests, "HASH_ALWAYS_BYTES", 0)  # every file counts as large: checked by size
    flip_two_bytes(target)
    assert "tokenised pairs: reused" in run_prepare(flags, caplog)
    log = run_prepare([*flags, "--verify_cache"], caplog)  # every file's content checked
    assert f"warning: {target} is damaged" in log and "tokenised pairs: reused" not in log


def test_partial_folders_of_dead_processes_are_removed_and_live_ones_stay(tmp_path) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        dead_partial = tmp_path / f"tokenized-a.partial-{socket.gethostname()}-{ended.pid}"
        live_partial = tmp_path / f".bpe-b.partial-{socket.gethostname()}-{alive.pid}"
        for partial in (dead_partial, live_partial):
            partial.mkdir()
            (partial / "source.bin").write_bytes(b"half")
        build_once(tmp_path / "bpe-c", lambda folder: folder.mkdir())
        assert not dead_partial.exists() and (live_partial / "source.bin").read_bytes() == b"half"
    finally:
        alive.kill()
        alive.wait()


def test_an_entry_is_reused_only_with_its_manifest(tmp_path) -> None:
    built: list[Path] = []

    def build(folder: Path) -> None:
        built.append(folder)
        folder.mkdir()
        (folder / "data.json").write_text("[1, 2]")

    entry = tmp_path / "bpe-key"
    assert prepared_entry(entry, build) == (entry, False)
    assert prepared_entry(entry, build) == (entry, True) and len(built) == 1
    (entry / "data.json").write_text("[1, 3]")  # same size, other content
    assert prepared_entry(entry, build) == (entry, False) and len(built) == 2
    assert (entry / "data.json").read_text() == "[1, 2]"


@pytest.mark.parametrize("name", ["extra", "nested/deeper"])
def test_the_manifest_lists_every_file_with_its_size(tmp_path, name) -> None:
    def build(folder: Path) -> None:
        (folder / name).parent.mkdir(parents=True)
        (folder / name).write_bytes(b"12345")

    entry = build_once(tmp_path / "text-key", build)
    assert manifest_problem(entry, verify_hashes=True) is None
    (entry / name).unlink()
    assert manifest_problem(entry, verify_hashes=False) == f"{entry / name} is missing"


# vaswani-prepare with writes beyond 4 KiB refused (EFBIG), as a full disk refuses them (ENOSPC)
SIZE_LIMITED_PREPARE = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, not a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
from vaswani_transformer.cli import prepare
sys.exit(prepare.main(sys.argv[1:]))
"""


@pytest.mark.slow  # a fresh interpreter that imports the package
def test_a_preparation_the_machine_refuses_leaves_nothing_and_names_the_path(tmp_path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SIZE_LIMITED_PREPARE, *prepare_flags(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert run.returncode == 2, run.stderr
    assert f"file size limit exceeded while writing {tmp_path / 'cache'}/" in run.stderr
    assert "MB free there): free space or choose another --data_cache" in run.stderr
    assert "Traceback" not in run.stderr
    assert [path.name for path in (tmp_path / "cache").iterdir() if not path.name.endswith(".lock")] == []


def test_a_damaged_entry_that_cannot_be_removed_is_exit_2_naming_the_file(tmp_path, caplog, capsys) -> None:
    flags = prepare_flags(tmp_path)
    run_prepare(flags, caplog)
    entry = tokenized_entry(tmp_path / "cache")
    (entry / "source.bin").write_bytes(b"cut")
    if subprocess.run(["chattr", "+i", str(entry)], capture_output=True).returncode != 0:
        pytest.skip("this file system cannot make a folder immutable (chattr +i), which the test needs")
    try:
        assert prepare.main(flags) == 2
    finally:
        subprocess.run(["chattr", "-i", str(entry)], check=True)
    error = capsys.readouterr().err
    assert f"{entry / 'source.bin'} has 3 bytes where" in error and "Traceback" not in error
    assert (
        f"{entry} cannot be removed (Operation not permitted): remove it by hand or choose another --data_cache"
        in error
    )
