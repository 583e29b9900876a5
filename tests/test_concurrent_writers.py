"""Writers that exclude each other: two commands writing the same output at once never both succeed;
the second stops with exit 2 naming the first (its PID, host and lock) before its long work, and the first's
result stays whole. What a writer killed with kill -9 left under a temporary name is removed by the next run.

The processes are real: two commands started together, or a command meeting a claim that another process holds
(`claims.claimed_output`, as the command itself takes it). The cases where a claim is held by the test process are
in tests/test_bad_inputs.py (WRITERS_CASES).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import tatoeba_files
from tests.convert.conftest import save_small_fsmt
from vaswani_transformer.claims import OutputInUse, claim_path, claimed_output
from vaswani_transformer.cli import average, convert, evaluate, export, export_onnx, push
from vaswani_transformer.files.partials import partial_path

# A claim held by a process of its own until its standard input closes; a folder's holder first writes its result
# into it (a named result's, whose file is written at its end, does not).
HOLDER = """
import sys
from pathlib import Path
from vaswani_transformer.claims import claimed_output
output = Path(sys.argv[1])
with claimed_output(output, "OUTPUT"):
    if sys.argv[2] == "folder":
        output.mkdir(parents=True, exist_ok=True)
        (output / "result.txt").write_text("the first writer's")
    print("held", flush=True)
    sys.stdin.read()
"""


@contextmanager
def claim_held_by_another_process(output: Path, kind: str = "folder") -> Iterator[subprocess.Popen]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(output), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.communicate(timeout=60)
    assert holder.returncode == 0


@pytest.mark.slow  # a second process that imports the package
def test_a_claim_names_its_holder_and_leaves_no_lock_file(tmp_path: Path) -> None:
    output = tmp_path / "new" / "export"
    with claim_held_by_another_process(output) as holder:
        holding = claim_path(output).read_text()
        with pytest.raises(OutputInUse) as refused, claimed_output(output, "OUTPUT_DIR"):
            pytest.fail("a second writer got the claim")
    assert holding == f"PID {holder.pid} on {socket.gethostname()}\n"
    assert str(refused.value) == (
        f"{output} is being written by another process (PID {holder.pid} on {socket.gethostname()}, which holds "
        f"{claim_path(output)}): wait for it to finish, or choose another OUTPUT_DIR."
    )
    assert sorted(path.name for path in output.parent.iterdir()) == [
        "export"
    ]  # the lock went with the holder
    with claimed_output(output, "OUTPUT_DIR"):  # free again
        pass


def test_a_lock_file_its_killed_holder_left_is_claimed_and_removed(tmp_path: Path) -> None:
    output = tmp_path / "export"
    claim_path(output).write_text("PID 1 on a machine that was switched off\n")  # nobody holds the lock
    with claimed_output(output, "OUTPUT_DIR"):
        assert claim_path(output).read_text() == f"PID {os.getpid()} on {socket.gethostname()}\n"
    assert list(tmp_path.iterdir()) == []  # and the folder made for nothing is not left either


@pytest.fixture
def model(trained_run, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained_run.model_dir, tmp_path / "model"))


@pytest.fixture
def run(trained_run, tmp_path: Path) -> Path:
    ignored = shutil.ignore_patterns("final", "runs")
    return Path(shutil.copytree(trained_run.output_dir, tmp_path / "run", ignore=ignored))


def evaluation_of(model: Path) -> Path:
    """The folder vaswani-evaluate writes into by default (beside the model), made here."""
    folder = model.parent / f"{model.name}-evaluation"
    folder.mkdir(exist_ok=True)
    return folder


def scored_set(tmp_path: Path) -> list[str]:
    """--source and --references of a small test set."""
    (tmp_path / "corpus").mkdir(exist_ok=True)
    corpus = tatoeba_files(tmp_path / "corpus", 30)
    return ["--source", corpus["test_source"], "--references", corpus["test_target"]]


# The second writer of each command, given the output another process holds: (main, arguments).
SECOND_WRITERS: dict[str, Callable[[Path, Path], tuple[Callable[[list[str]], int], list[str]]]] = {
    "export": lambda root, output: (export.main, [str(root / "model"), str(output)]),
    "export-onnx": lambda root, output: (export_onnx.main, [str(root / "model"), str(output)]),
    "convert": lambda root, output: (convert.main, ["fsmt", str(root / "fsmt"), str(output)]),
    "average": lambda root, output: (
        average.main,
        [str(root / "run"), "--last", "1", "--output", str(output)],
    ),
    "push": lambda root, output: (
        push.main,
        [str(root / "model"), "--repo_id", "tester/x", "--local_dir", str(output)],
    ),
}


@pytest.mark.slow  # two commands in processes of their own
@pytest.mark.parametrize("name", SECOND_WRITERS)
def test_a_second_writer_stops_naming_the_first_and_leaves_its_result_whole(
    name: str, model: Path, run: Path, tmp_path: Path, capsys
) -> None:
    if name == "convert":
        save_small_fsmt(tmp_path / "fsmt")
    output = tmp_path / "out"
    main, arguments = SECOND_WRITERS[name](tmp_path, output)
    with claim_held_by_another_process(output) as first:
        assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"{output} is being written by another process (PID {first.pid} on {socket.gethostname()}" in error
    assert "Traceback" not in error
    assert [path.name for path in output.iterdir()] == ["result.txt"]
    assert (output / "result.txt").read_text() == "the first writer's"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["out", "model", "run", *(["fsmt"] if name == "convert" else [])]
    )


@pytest.mark.slow  # two commands in processes of their own
def test_a_second_evaluation_of_a_name_stops_before_decoding(model: Path, tmp_path: Path, capsys) -> None:
    scores = evaluation_of(model) / "conc_scores.json"
    with claim_held_by_another_process(scores, "file") as first:
        assert evaluate.main([str(model), *scored_set(tmp_path), "--name", "conc", "--num_beams", "1"]) == 2
    error = capsys.readouterr().err
    assert f"{scores} is being written by another process (PID {first.pid} on " in error
    assert error.rstrip().endswith("wait for it to finish, or choose another --name.")
    assert not scores.exists() and not claim_path(scores).exists()


def command(name: str, *arguments: str | Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "vaswani_transformer", name, *map(str, arguments)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def one_wins(first: subprocess.Popen, second: subprocess.Popen, *, earlier: str) -> subprocess.Popen:
    """Of two commands started together, the one that exited 0; the other exited 2, refused by the winner's
    claim (naming it) or, had it started after the winner finished, by the winner's result (`earlier`)."""
    outcomes = {process: process.communicate(timeout=900) for process in (first, second)}
    (winner,) = [process for process in outcomes if process.returncode == 0]
    (loser,) = [process for process in outcomes if process is not winner]
    error = outcomes[loser][1]
    assert loser.returncode == 2 and "Traceback" not in error, error
    assert f"(PID {winner.pid} on {socket.gethostname()}" in error or earlier in error, error
    return winner


@pytest.mark.slow  # two evaluations in processes of their own
def test_two_evaluations_of_one_name_at_once_keep_one_whole_result(model: Path, tmp_path: Path) -> None:
    """Two evaluations of one name at once both exited 0, the first's scores gone; now one stays whole."""
    flags = [model, *scored_set(tmp_path), "--name", "conc"]
    greedy, beam = (
        command("evaluate", *flags, "--num_beams", "1"),
        command("evaluate", *flags, "--num_beams", "2"),
    )
    winner = one_wins(greedy, beam, earlier="holds an earlier evaluation's scores")
    scores = json.loads((evaluation_of(model) / "conc_scores.json").read_text())
    assert scores["decoding"]["num_beams"] == (1 if winner is greedy else 2)
    assert not [
        path for path in evaluation_of(model).iterdir() if path.name.startswith(".")
    ]  # no lock, no temporary


@pytest.mark.slow  # three CTranslate2 exports
def test_two_exports_into_one_folder_at_once_keep_one_whole_export(model: Path, tmp_path: Path) -> None:
    """An int8 and a float32 export once both exited 0, the int8 one replaced; now one export stays whole."""
    output = tmp_path / "out"
    int8 = command("export-ctranslate2", model, output, "--quantization", "int8")
    float32 = command("export-ctranslate2", model, output, "--quantization", "float32")
    winner = one_wins(int8, float32, earlier="is not empty")
    reference = tmp_path / "reference"
    quantization = "int8" if winner is int8 else "float32"
    assert export.main([str(model), str(reference), "--quantization", quantization]) == 0
    assert (output / "model.bin").read_bytes() == (reference / "model.bin").read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model", "out", "reference"]  # no temporary


@pytest.fixture
def ended_pid() -> int:
    """The PID of a process that has ended (as one killed with kill -9 has)."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield alive.pid
    alive.kill()
    alive.wait()


def leftovers(final: Path, pid: int) -> Path:
    """The temporary a writer of `final` with PID `pid` on this host writes under (`files.partial_path`)."""
    return partial_path(final).with_name(partial_path(final).name.replace(f"-{os.getpid()}", f"-{pid}"))


# Each writer's successful run into OUTPUT (a folder, or evaluate's named result beside the model).
WRITERS: dict[str, Callable[[Path], tuple[Path, Callable[[], int]]]] = {
    "average": lambda root: (
        root / "out",
        lambda: average.main([str(root / "run"), "--last", "1", "--output", str(root / "out")]),
    ),
    "push": lambda root: (
        root / "out",
        lambda: push.main([str(root / "model"), "--repo_id", "tester/x", "--local_dir", str(root / "out")]),
    ),
    "evaluate": lambda root: (
        evaluation_of(root / "model") / "x_scores.json",
        lambda: evaluate.main([str(root / "model"), *scored_set(root), "--name", "x", "--num_beams", "1"]),
    ),
    "export-onnx": lambda root: (
        root / "out",
        lambda: export_onnx.main([str(root / "model"), str(root / "out")]),
    ),
}


@pytest.mark.parametrize(
    "name",  # the ONNX export is slow (an end-to-end export); the other writers share its cleanup
    [pytest.param(name, marks=pytest.mark.slow) if name == "export-onnx" else name for name in WRITERS],
)
def test_what_a_killed_writer_left_is_removed_by_the_next_run(
    name: str, model: Path, run: Path, tmp_path: Path, ended_pid: int, live_pid: int
) -> None:
    """kill -9 during vaswani-export-onnx or vaswani-average left .NAME.partial-PID that no later run removed."""
    if name == "export-onnx":
        pytest.importorskip("onnx")
    output, write = WRITERS[name](tmp_path)
    dead, live = leftovers(output, ended_pid), leftovers(output, live_pid)
    elsewhere = output.with_name(f".{output.name}.partial-another-host-{ended_pid}")
    for partial in (dead, live, elsewhere):
        partial.mkdir()
        (partial / "half").write_bytes(b"half-written")
    assert write() == 0
    assert output.exists() and not dead.exists()
    assert (live / "half").is_file() and (elsewhere / "half").is_file()  # being written, or not ours to judge
    assert not claim_path(output).exists()


def test_what_a_killed_hypotheses_writer_left_is_removed_by_the_next_evaluation(
    model: Path, tmp_path: Path, ended_pid: int
) -> None:
    dead = leftovers(evaluation_of(model) / "x_hypotheses.txt", ended_pid)
    dead.write_text("half")
    assert evaluate.main([str(model), *scored_set(tmp_path), "--name", "x", "--num_beams", "1"]) == 0
    assert not dead.exists() and (evaluation_of(model) / "x_hypotheses.txt").is_file()
