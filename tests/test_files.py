"""One rule tells a local path from a Hub id, for models (`check_model_name`) and corpora (`load_parallel`, the
training flags): a missing local name is an error naming it, never a Hub request. Folders are written whole or not
at all (`folder_written_whole`), and a write the machine refuses is said with its path and the fix."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vaswani_transformer.data import load_parallel
from vaswani_transformer.evaluation import check_model_name
from vaswani_transformer.files import partials, writing
from vaswani_transformer.files.partials import partial_path
from vaswani_transformer.files.paths import check_apart, check_input_file, is_local_path
from vaswani_transformer.files.writing import folder_written_whole


@pytest.mark.parametrize(
    "name",
    ["./model", "/abs/model", "~/model", "runs\\model", "a/b/c", "train.en", "corpus.tsv.gz", "runs/typo"],
)
def test_names_that_mean_this_machine(name: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()  # "runs/typo" lies in a folder that exists here
    assert is_local_path(name) and is_local_path(Path(name))


@pytest.mark.parametrize(
    "name", ["wmt/wmt14", "Helsinki-NLP/opus-mt-en-de", "meta-llama/Llama-3.1-8B", "user/model.v1", "gpt2"]
)
def test_hub_ids(name: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert not is_local_path(name)
    (tmp_path / name).mkdir(parents=True)  # the same name existing here is the local folder
    assert is_local_path(name)


def test_a_mistyped_run_folder_is_named_for_models_and_corpora(tmp_path: Path, monkeypatch) -> None:
    """`runs/tatoeba-en-dee` beside an existing runs/: not asked of the Hub as a repository "runs/..."."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "tatoeba-en-de").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="runs/tatoeba-en-dee: no such model folder"):
        check_model_name("runs/tatoeba-en-dee")
    assert check_model_name("runs/tatoeba-en-de") == "runs/tatoeba-en-de"
    with pytest.raises(FileNotFoundError, match="runs/pairs: no such file"):
        load_parallel("runs/pairs")


def test_a_model_file_given_for_its_folder_is_named_as_a_file(tmp_path: Path) -> None:
    """`MODEL/model.safetensors` is named as a file (transformers got it, and its error spoke of Hub ids)."""
    weights = tmp_path / "model" / "model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"weights")
    with pytest.raises(
        NotADirectoryError, match=r"model\.safetensors is a file: give the folder that holds it"
    ):
        check_model_name(str(weights))
    assert check_model_name(weights.parent) == str(weights.parent)


def test_an_input_file_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "input.en").write_text("Hi.\n")
    check_input_file(tmp_path / "input.en")
    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a folder: give a file inside it"):
        check_input_file(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"missing\.en: no such file"):
        check_input_file(tmp_path / "missing.en")


@pytest.mark.parametrize(
    ("output", "relation"),
    [("runs/final", "is"), ("link", "is"), ("runs/../runs/final/ct2", "is inside"), ("link/onnx", "is inside"),
     ("runs", "contains"), (".", "contains")],
)  # fmt: skip
def test_an_output_is_kept_apart_from_its_inputs_however_it_is_spelt(
    output: str, relation: str, tmp_path: Path, monkeypatch
) -> None:
    """`vaswani-export-ctranslate2 MODEL MODEL --overwrite` once replaced the model's config.json. An output
    that is, holds or lies inside an input is refused, paths compared resolved (a link, `..`), naming both."""
    model = tmp_path / "runs" / "final"
    model.mkdir(parents=True)
    (tmp_path / "link").symlink_to(model)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as refused:
        check_apart("--output", output, {"the model folder": model, "the corpus": tmp_path / "train.en"})
    assert str(refused.value) == (
        f"--output {output} {relation} the model folder {model} (an input): choose a folder apart from it."
    )


def test_an_output_may_lie_where_its_command_documents_it(tmp_path: Path, monkeypatch) -> None:
    """Beside an input is apart; inside or around one only where the command says so (vaswani-average's
    RUN/averaged, pictures in a folder that holds the model folder); onto one never."""
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.chdir(tmp_path)
    check_apart("--output", "averaged", {"the run folder": run})
    check_apart("--output", "run/averaged", {"the run folder": run}, may_lie_inside={"the run folder"})
    check_apart("--output_dir", ".", {"the run folder": run}, may_contain={"the run folder"})
    check_apart("--output", "run", {"the run folder": None})  # not given, or a Hub id
    with pytest.raises(ValueError, match="is the run folder"):
        check_apart(
            "--output",
            "run",
            {"the run folder": run},
            may_lie_inside={"the run folder"},
            may_contain={"the run folder"},
        )


def test_a_new_folder_appears_only_when_whole(tmp_path: Path) -> None:
    final = tmp_path / "export"
    with folder_written_whole(final, "--output") as temporary:
        (temporary / "model.bin").write_bytes(b"weights")
        assert not final.exists()
    assert (final / "model.bin").read_bytes() == b"weights"
    assert [path.name for path in tmp_path.iterdir()] == ["export"]


def test_a_failure_leaves_the_earlier_folder_as_it_was_and_no_temporary(tmp_path: Path) -> None:
    final = tmp_path / "export"
    final.mkdir()
    (final / "model.bin").write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), folder_written_whole(final, "--output") as temporary:
        (temporary / "model.bin").write_bytes(b"half")
        raise KeyboardInterrupt
    assert (final / "model.bin").read_bytes() == b"old"
    assert [path.name for path in tmp_path.iterdir()] == ["export"]


def test_writing_over_a_folder_replaces_only_the_files_written(tmp_path: Path) -> None:
    final = tmp_path / "export"
    (final / "sub").mkdir(parents=True)
    (final / "notes.txt").write_text("the user's")
    (final / "sub" / "a.json").write_text("old")
    with folder_written_whole(final, "--output") as temporary:
        (temporary / "sub").mkdir()
        (temporary / "sub" / "a.json").write_text("new")
    assert (final / "notes.txt").read_text() == "the user's" and (
        final / "sub" / "a.json"
    ).read_text() == "new"


@pytest.mark.slow  # a fresh interpreter that imports the package
def test_a_write_past_the_machine_s_limit_names_the_path_and_the_fix(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel refuse writes past 64 KB (EFBIG), as a full disk refuses them (ENOSPC)."""
    script = f"""
import resource, signal, sys
from pathlib import Path
from vaswani_transformer.files.writing import WriteError, folder_written_whole
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
try:
    with folder_written_whole(Path({str(tmp_path / "export")!r}), "--output") as temporary:
        (temporary / "model.bin").write_bytes(bytes(1 << 20))
except WriteError as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith(f"file size limit exceeded while writing {tmp_path / 'export'} (")
    assert done.stdout.rstrip().endswith("MB free there): free space or choose another --output"), done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two renames"])
def test_a_folder_written_over_is_replaced_as_a_whole(
    exchange: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files replaced one by one once let a reader (or a second writer) meet a folder half old, half new. Now
    the new folder, with the files the writer did not write linked in, takes the earlier one's place at once: a
    new folder (another inode) holds all; with no renameat2, the earlier folder is moved aside and back on failure."""
    if not exchange:
        monkeypatch.setattr(writing.ctypes, "CDLL", lambda *args, **kwargs: object())
    final = tmp_path / "export"
    (final / "sub").mkdir(parents=True)
    (final / "notes.txt").write_text("the user's")
    (final / "model.bin").write_text("old")
    earlier = final.stat().st_ino
    with folder_written_whole(final, "--output") as temporary:
        (temporary / "model.bin").write_text("new")
    assert final.stat().st_ino != earlier
    assert {path.name: path.read_text() for path in final.iterdir() if path.is_file()} == {
        "notes.txt": "the user's",
        "model.bin": "new",
    }
    assert (final / "sub").is_dir() and [path.name for path in tmp_path.iterdir()] == ["export"]


def test_partial_names_carry_the_host_and_the_pid(tmp_path: Path) -> None:
    host, pid = socket.gethostname(), os.getpid()
    assert partial_path(tmp_path / "out").name == f".out.partial-{host}-{pid}"
    assert partial_path(tmp_path / "x_scores.json").name == f".x_scores.partial-{host}-{pid}.json"
    match = partials.PARTIAL_NAME.fullmatch(partial_path(tmp_path / "x_scores.json").name)
    assert match is not None and (match["name"], match["host"], match["pid"]) == ("x_scores", host, str(pid))
