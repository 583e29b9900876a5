"""All or nothing on disk: a write the machine refuses part-way (a full disk, a size limit) leaves no
half-written checkpoint, model, score file, picture or cache entry, keeps what was whole before, and ends the
command with one line naming the path and the fix.

The failures are real. `RLIMIT_FSIZE` (with SIGXFSZ ignored) makes the kernel refuse, with EFBIG, every write past
a size, in a subprocess, as a full disk refuses it with ENOSPC. A small tmpfs is a full disk itself; mounting one
needs root (CAP_SYS_ADMIN), so only those tests are skipped, saying so, where mounting is impossible.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TINY, tatoeba_files
from vaswani_transformer.training.checkpoints import checkpoint_problem, find_checkpoints

pytestmark = pytest.mark.slow  # every test runs a command in a fresh interpreter

# A console command's main through the commands' wrapper, with the kernel's file size limit set once the package
# is imported (none: no limit).
LIMITED = """
import resource, signal, sys
from vaswani_transformer.cli import {module} as cli
from vaswani_transformer.cli.command import command
if {limit} is not None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
sys.exit(command(cli.main)(sys.argv[1:]))
"""


def run_command(
    module: str, arguments: list[str], cwd: Path, *, file_limit: int | None = None, **env: str
) -> subprocess.CompletedProcess:
    """vaswani-<module> in a process of its own, every file it writes limited to `file_limit` bytes."""
    command = [sys.executable, "-c", LIMITED.format(module=module, limit=file_limit), *arguments]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def partials(root: Path) -> list[Path]:
    """What a write left behind under a temporary name."""
    return [path for path in root.rglob("*") if ".partial-" in path.name or path.name.endswith(".tmp")]


def train_flags(corpus: dict[str, str], output_dir: Path, cache: Path, max_steps: int) -> list[str]:
    flags = [item for name, path in corpus.items() for item in (f"--{name}", path)]
    return [
        *flags,
        *("--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"),
        *("--max_steps", str(max_steps), "--warmup_steps", "1", "--save_steps", "2", "--average_last", "3"),
        *("--dev_size", "0", "--eval_steps", "0", "--num_beams", "1", "--examples", "A dog."),
        *("--output_dir", str(output_dir), "--data_cache", str(cache)),
    ]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 700 KB tmpfs: room for the miniature's vocabulary and one checkpoint, not for two."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here (needs root, CAP_SYS_ADMIN): {mounted.stderr.decode().strip()}"
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_in_training_keeps_the_last_whole_checkpoint_and_resume_continues(
    small_disk: Path, tmp_path: Path
) -> None:
    """A checkpoint that did not fit was once left without weights, with a SafetensorError
    traceback. Now it is removed, the last whole one stays, one line says how to continue, and --resume does,
    once there is room."""
    corpus = tatoeba_files(tmp_path, 150)
    flags = train_flags(corpus, small_disk / "run", tmp_path / "cache", max_steps=6)
    stopped = run_command("train", flags, tmp_path)
    assert stopped.returncode == 5, stopped.stderr
    assert "Traceback" not in stopped.stderr
    (line,) = error_lines(stopped.stderr)
    checkpoints = find_checkpoints(small_disk / "run")
    assert checkpoints and all(checkpoint_problem(path) is None for path in checkpoints)
    failed = line.split("no space left on device while writing ")[1].split(" (")[0]
    assert not Path(tmp_path / failed).exists() and not Path(failed).exists()
    assert line.endswith(
        f"free space or choose another --output_dir. Once there is room, the same command with --resume "
        f"continues the run from {checkpoints[-1]}."
    )
    assert partials(small_disk) == []

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # room made
    resumed = run_command("train", [*flags, "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"--resume: continuing from {checkpoints[-1].name}" in resumed.stderr
    assert (small_disk / "run" / "final" / "scores.json").is_file()


def test_a_checkpoint_past_the_size_limit_leaves_no_partial_folder(tmp_path: Path) -> None:
    """The first checkpoint's weights (120 KB) exceed the 64 KB the kernel allows: no checkpoint-2 is left, and
    the run can start again with --resume."""
    corpus = tatoeba_files(tmp_path, 150)
    run = tmp_path / "run"
    done = run_command("train", train_flags(corpus, run, tmp_path / "cache", 2), tmp_path, file_limit=1 << 16)
    assert done.returncode == 5 and "Traceback" not in done.stderr, done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(f"error: file size limit exceeded while writing {run / 'checkpoint-2'} (")
    assert line.endswith("continues the run from the start (no checkpoint was saved whole).")
    assert find_checkpoints(run) == [] and partials(tmp_path) == []


@pytest.fixture
def scored_model(trained_run, tmp_path: Path) -> Path:
    """A copy of the trained miniature's scored model folder, with an earlier evaluation named x."""
    model = shutil.copytree(trained_run.model_dir, tmp_path / "model")
    (model / "x_scores.json").write_text('{"earlier": true}\n')
    (model / "x_hypotheses.txt").write_text("earlier\n")
    return model


def contents(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_averaging_into_a_scored_folder_past_the_size_limit_leaves_it_as_it_was(
    trained_run, scored_model: Path, tmp_path: Path
) -> None:
    """The averaged weights do not fit into an earlier, scored average: the folder keeps its weights and the
    scores that measured them. (A model folder the training job wrote, with its train_options.json, is refused
    before any work: OUTPUTS_APART_CASES.)"""
    run = shutil.copytree(
        trained_run.output_dir, tmp_path / "run", ignore=shutil.ignore_patterns("final", "runs")
    )
    (scored_model / "train_options.json").unlink()  # an average carries no training record
    before = contents(scored_model)
    done = run_command(
        "average", [str(run), "--last", "2", "--output", str(scored_model)], tmp_path, file_limit=1 << 16
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(f"error: file size limit exceeded while writing {scored_model} (")
    assert line.endswith("MB free there): free space or choose another --output")
    assert contents(scored_model) == before and partials(tmp_path) == []


def test_scores_that_do_not_fit_replace_neither_file(trained_run, tmp_path: Path) -> None:
    """The disk fills while decoding (the check before it passed): neither the hypotheses nor the scores of the
    earlier evaluation are replaced, and no temporary is left."""
    evaluation = tmp_path / "evaluation"
    evaluation.mkdir()
    (evaluation / "x_scores.json").write_text('{"earlier": true}\n')
    (evaluation / "x_hypotheses.txt").write_text("earlier\n")
    sources = tmp_path / "test.en"
    references = tmp_path / "test.de"
    corpus = tatoeba_files(tmp_path, 150)
    shutil.copy(corpus["train_source"], sources)
    shutil.copy(corpus["train_target"], references)
    before = contents(evaluation)
    arguments = [str(trained_run.model_dir), "--source", str(sources), "--references", str(references)]
    arguments += ["--name", "x", "--overwrite", "--num_beams", "1", "--output_dir", str(evaluation)]
    done = run_command("evaluate", arguments, tmp_path, file_limit=1024)  # both files are bigger
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(f"error: file size limit exceeded while writing {evaluation / 'x_scores.json'} (")
    assert line.endswith("free space or choose another --output_dir")
    assert contents(evaluation) == before and partials(tmp_path) == []


def prepare_flags(corpus: dict[str, str]) -> list[str]:
    flags = [item for name, path in corpus.items() for item in (f"--{name}", path)]
    return [*flags, "--vocab_size", "300", "--dev_size", "0", "--eval_steps", "0"]


def test_preparing_into_a_hf_home_past_the_size_limit_names_it(tmp_path: Path) -> None:
    """The vocabulary (19 KB) does not fit in the 8 KB the kernel allows under HF_HOME: one line naming the data
    cache and how to choose another, and no half-built entry."""
    corpus = tatoeba_files(tmp_path, 150)
    home = tmp_path / "hf"
    done = run_command("prepare", prepare_flags(corpus), tmp_path, file_limit=8192, HF_HOME=str(home))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = error_lines(done.stderr)
    prepared = home / "vaswani_transformer" / "prepared"
    assert line.startswith(f"error: file size limit exceeded while writing {prepared} (")
    assert line.endswith("free space or choose another --data_cache (or HF_HOME)")
    assert partials(home) == [] and not list(prepared.glob("bpe-*/"))


def test_preparing_into_a_full_hf_home_names_it(small_disk: Path, tmp_path: Path) -> None:
    """HF_HOME on a full disk is named (preparation ended with a pyarrow OSError traceback)."""
    (small_disk / "filler").write_bytes(
        bytes(700 * 1024 - 24 * 1024)
    )  # 24 KB left: the text, not the vocabulary
    done = run_command(
        "prepare", prepare_flags(tatoeba_files(tmp_path, 150)), tmp_path, HF_HOME=str(small_disk)
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(
        f"error: no space left on device while writing {small_disk / 'vaswani_transformer'}"
    )
    assert partials(small_disk) == []


def test_a_hub_corpus_with_a_full_datasets_cache_is_refused_before_loading(
    small_disk: Path, tmp_path: Path
) -> None:
    """`datasets` caches a Hub corpus under HF_HOME: with no byte free there, preparation stops before any request
    (the Hub is not even asked, offline), naming the place."""
    filler = small_disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as file:
        while True:  # until the disk is full
            file.write(bytes(4096))
    corpus = tatoeba_files(tmp_path, 150)
    arguments = ["--train_source", "tester/corpus", "--test_source", corpus["test_source"]]
    arguments += ["--test_target", corpus["test_target"], "--dev_size", "0", "--eval_steps", "0"]
    arguments += ["--data_cache", str(tmp_path / "cache")]
    done = run_command("prepare", arguments, tmp_path, HF_DATASETS_CACHE=str(small_disk / "datasets"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(
        f"error: no space left on device while writing {small_disk / 'datasets'} (0 MB free"
    )
    assert line.endswith("free space or choose another HF_HOME (or HF_DATASETS_CACHE)")
    assert sorted(small_disk.iterdir()) == [filler]


def test_a_picture_past_the_size_limit_leaves_no_file(tmp_path: Path) -> None:
    done = run_command("plot_positional_encoding", ["--output", "pe.png"], tmp_path, file_limit=4096)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert error_lines(done.stderr)[0].startswith("error: file size limit exceeded while writing pe.png (")
    assert list(tmp_path.iterdir()) == []


def test_the_check_before_long_work_finds_a_place_that_takes_no_byte(tmp_path: Path) -> None:
    """`check_writable` writes a byte where the output goes: with the kernel allowing none (as a full disk), the
    check fails naming the path and the flag, and leaves nothing there."""
    script = f"""
import resource, signal
from pathlib import Path
from vaswani_transformer.files.writing import check_writable, WriteError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
try:
    check_writable(Path({str(tmp_path / "new" / "run")!r}), "--output_dir")
except WriteError as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith(f"file size limit exceeded while writing {tmp_path / 'new' / 'run'} ("), (
        done.stderr
    )
    assert done.stdout.rstrip().endswith("free space or choose another --output_dir")
    assert list(tmp_path.iterdir()) == []


def test_translations_onto_a_full_disk_name_the_file_behind_standard_output(
    trained_run, tmp_path: Path
) -> None:
    """The file is named, not a raw "[Errno 28] No space left on device" and Python's own complaint at exit.
    /dev/full refuses every write as a full disk does (ENOSPC)."""
    sources = tmp_path / "input.en"
    sources.write_text("I love you.\nWhere is the train station?\n", encoding="utf-8")
    command = [sys.executable, "-m", "vaswani_transformer", "translate", str(trained_run.model_dir)]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*command, str(sources), "--num_beams", "1"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
    assert done.returncode == 2 and "Traceback" not in done.stderr and "Exception" not in done.stderr, (
        done.stderr
    )
    (line,) = error_lines(done.stderr)
    assert line.startswith("error: standard output: no space left on device while writing /dev/full (")
    assert line.endswith("MB free there): free space or choose another file for standard output (> FILE)")


def test_hub_files_past_the_size_limit_leave_no_local_dir(trained_run, tmp_path: Path) -> None:
    """vaswani-push --local_dir on a full disk leaves no local dir (it gave a raw [Errno 28] naming a hidden
    temporary). The weights (120 KB) exceed the 64 KB the kernel allows."""
    local_dir = tmp_path / "hub"
    arguments = [str(trained_run.model_dir), "--repo_id", "tester/x", "--local_dir", str(local_dir)]
    done = run_command("push", arguments, tmp_path, file_limit=1 << 16)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(f"error: file size limit exceeded while writing {local_dir} (")
    assert line.endswith("MB free there): free space or choose another --local_dir")
    assert list(tmp_path.iterdir()) == []
