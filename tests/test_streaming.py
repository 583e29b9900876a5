"""Streaming: `vaswani-translate` writes each buffer's translations before it reads on, and the console
commands end on Ctrl-C, SIGTERM and a closed pipe as vaswani_transformer/cli/command.py says, end to end: the real
commands in subprocesses, stopped by real signals."""

import io
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import SENTENCES, TINY, tatoeba_files
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.decoding import translate as pipeline_module
from vaswani_transformer.decoding.translate import DecodingBudgetError
from vaswani_transformer.engines import EngineOptions, load_engine
from vaswani_transformer.evaluation import streaming, translate_and_score
from vaswani_transformer.evaluation.streaming import translate_lines

REPO = Path(__file__).resolve().parents[1]
# The commands see this checkout's code, as the tests do, and never the network.
ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
WAIT = 300  # seconds a command may take to start and translate its first buffer on a busy machine


def console(name: str) -> str:
    """The installed console command `name`, beside this interpreter."""
    path = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert path is not None, f"{name} is not installed (pip install -e .)"
    return path


def line_within(stream: IO[bytes], seconds: float) -> bytes | None:
    """The next line of `stream`, or None if none comes within `seconds` (the reading thread is left behind)."""
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=seconds)
    except queue.Empty:
        return None


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def stdin_of(monkeypatch: pytest.MonkeyPatch, raw: bytes | io.RawIOBase) -> None:
    stream = io.BytesIO(raw) if isinstance(raw, bytes) else io.BufferedReader(raw)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stream, encoding="utf-8"))


# --- streaming


@pytest.mark.slow  # a command in a fresh interpreter
def test_the_first_translations_come_out_while_standard_input_is_still_open(trained_run) -> None:
    """Before streaming, nothing came out until standard input ended: this test's first read would time out."""
    command = [
        console("vaswani-translate"),
        str(trained_run.model_dir),
        "--num_beams",
        "1",
        "--device",
        "cpu",
    ]
    process = subprocess.Popen(
        [*command, "--buffer_lines", "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write("".join(f"{line}\n" for line in SENTENCES[:3]).encode())
        process.stdin.flush()  # one buffer's worth, and standard input stays open
        first = [line_within(process.stdout, WAIT) for _ in range(3)]
        assert None not in first, "no translation came out while standard input was open"
        assert process.poll() is None  # still reading: the translations did not wait for the end
        again = "".join(f"{line}\n" for line in SENTENCES[:3]).encode()
        rest, error = process.communicate(again, timeout=WAIT)  # and the end of the input
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, error.decode()[-2000:]
    assert rest.decode().splitlines() == [line.decode().removesuffix("\n") for line in first]  # same input


@pytest.mark.slow  # random weights decode every sentence to its output limit
def test_translations_over_several_buffers_are_those_of_the_whole_input(
    random_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # 14 lines over buffers of 5, blank and whitespace-only lines among them, one across a buffer's edge. Batches
    # of one sentence, as a buffer's edge would make them (each sentence's own output limit keeps them alike).
    lines = [*SENTENCES[:4], "", "   ", *SENTENCES, "", SENTENCES[1], "\u2028"]
    engine = load_engine(random_folder, EngineOptions(device="cpu"))
    expected = translate_lines(lines, engine, batch_size=1, num_beams=2)  # one call: every line in one sort
    assert [line for line, source in zip(expected, lines, strict=True) if not source.strip()] == [""] * 4
    arguments = [str(random_folder), "--num_beams", "2", "--batch_size", "1", "--buffer_lines", "5"]
    arguments += ["--device", "cpu"]
    stdin_of(monkeypatch, "".join(f"{line}\n" for line in lines).encode())
    assert translate_cli.main(arguments) == 0
    captured = capsys.readouterr()
    assert captured.out == "".join(f"{line}\n" for line in expected)
    assert "14 lines [" in captured.err and "/14" not in captured.err  # lines done; the total is unknown
    # files given as arguments are read buffer by buffer too, one file after another
    first, second = tmp_path / "first.en", tmp_path / "second.en"
    first.write_text("\n".join(lines[:7]) + "\n", encoding="utf-8")
    second.write_text("\n".join(lines[7:]), encoding="utf-8")  # no final newline
    assert translate_cli.main([*arguments, str(first), str(second)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "".join(f"{line}\n" for line in expected)
    assert "14/14" in captured.err  # files are counted before the model loads


class OneLineAtATime(io.RawIOBase):
    """Standard input that gives one line per read and fails the test when a line is asked for before every
    earlier buffer's translations were written."""

    def __init__(self, lines: list[bytes], buffer_lines: int, written: Callable[[], int]) -> None:
        self.lines, self.buffer_lines, self.written, self.served = lines, buffer_lines, written, 0

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # type: ignore[override]
        if self.served == len(self.lines):
            return 0
        earlier_buffers = self.served // self.buffer_lines * self.buffer_lines
        assert self.written() == earlier_buffers, (
            f"line {self.served + 1} read with {self.written()} translations written, not {earlier_buffers}"
        )
        line = self.lines[self.served]
        target[: len(line)] = line
        self.served += 1
        return len(line)


def test_standard_input_is_read_no_further_than_the_buffer_being_translated(
    trained_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = io.StringIO()
    monkeypatch.setattr(sys, "stdout", output)
    lines = [f"{SENTENCES[i % len(SENTENCES)]}\n".encode() for i in range(11)]
    reader = OneLineAtATime(lines, 3, lambda: output.getvalue().count("\n"))
    stdin_of(monkeypatch, reader)
    arguments = [str(trained_run.model_dir), "--num_beams", "1", "--buffer_lines", "3", "--device", "cpu"]
    assert translate_cli.main(arguments) == 0
    assert reader.served == 11 and output.getvalue().count("\n") == 11


def test_scoring_translates_buffer_by_buffer(random_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = load_engine(random_folder, EngineOptions(device="cpu"))
    calls: list[int] = []
    translate = engine.translate
    monkeypatch.setattr(
        engine, "translate", lambda texts, **options: calls.append(len(texts)) or translate(texts, **options)
    )
    monkeypatch.setattr(streaming, "BUFFER_BATCHES", 2)  # one batch of one sentence, then buffers of two
    sources = [*SENTENCES, "", SENTENCES[0]]
    hypotheses, scores = translate_and_score(
        engine, sources, sources, target_lang="de", batch_size=1, num_beams=2
    )
    assert calls == [1, 2, 2, 1]  # the blank line is never decoded
    monkeypatch.setattr(engine, "translate", translate)
    assert hypotheses == translate_lines(sources, engine, batch_size=1, num_beams=2) and hypotheses[5] == ""
    assert scores["num_sentences"] == 7


def test_an_error_found_mid_stream_says_what_was_written(
    trained_run, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Standard input can only be checked as it is read: bad bytes after two buffers end the command with 2 and
    the message says how many lines' translations are on standard output already."""
    good = "".join(f"{line}\n" for line in SENTENCES[:4]).encode()
    stdin_of(monkeypatch, good + "caf\u00e9\n".encode("latin-1") + b"No.\n")
    arguments = [str(trained_run.model_dir), "--num_beams", "1", "--buffer_lines", "2", "--device", "cpu"]
    assert translate_cli.main(arguments) == 2
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 4
    assert last_line(captured.err) == (
        "error: standard input is not UTF-8 text (byte 0xe9 on line 5): convert it first, e.g. with "
        "`iconv -f latin1 -t utf-8`. The translations of the first 4 line(s) were written before it."
    )
    # a later buffer that would not fit in memory is refused before it decodes, and says so alike
    check = pipeline_module.check_decoding_budget

    def refuse_long_sources(model, sentences, source_tokens, *arguments, **options) -> None:
        if source_tokens > 6:
            raise DecodingBudgetError(
                "needs about 9.0 GiB, but 1.0 GiB are free: lower --num_beams or --batch_size."
            )
        check(model, sentences, source_tokens, *arguments, **options)

    monkeypatch.setattr(pipeline_module, "check_decoding_budget", refuse_long_sources)
    stdin_of(monkeypatch, b"No.\nNo.\nTom is reading a book in the garden.\n")
    assert translate_cli.main(arguments) == 2
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 2
    assert last_line(captured.err).endswith(
        "lower --num_beams or --batch_size. The translations of the first 2 line(s) were written before it."
    )


# --- signals, end to end


def as_in_a_terminal() -> None:
    """A child's SIGINT as a shell sets it for a command in the foreground. Tests run as a background job of a
    script (`pytest &`, no job control) inherit SIGINT ignored, and a command keeps ignoring it, as every program
    does: that, not the load, is why this test once waited 300 s for a command that translated on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def busy_cpu() -> Iterator[None]:
    """A busy machine: a process that spins on a CPU while the test runs (at most two minutes)."""
    spin = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"
    spinner = subprocess.Popen([sys.executable, "-c", spin])
    yield
    spinner.kill()
    spinner.wait()


# When the signal comes: what the test waits for, and the options that make it so.
POINTS = {
    # the progress bar is up: the first buffer, one batch of 128 sentences with 4 beams, is decoding
    "while the first long batch decodes": ("progress", []),
    # the first buffer's lines are out, and the next buffer's 8 batches decode two at a time, in threads
    "after the first line, while batches decode in threads": ("line", ["--batch_size", "4"]),
    "after the first line, buffers of 8 lines": ("line", ["--buffer_lines", "8"]),
}


@pytest.mark.slow  # a command in a fresh interpreter per point
@pytest.mark.parametrize("point", sorted(POINTS))
@pytest.mark.parametrize(
    ("sent", "status", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_signal_during_translation_ends_it_with_one_line(
    trained_run, tmp_path: Path, busy_cpu: None, point: str, sent: signal.Signals, status: int, said: str
) -> None:
    waited_for, options = POINTS[point]
    source = tmp_path / "long.en"
    source.write_text("".join(f"{SENTENCES[i % len(SENTENCES)]}\n" for i in range(20_000)), encoding="utf-8")
    command = [console("vaswani-translate"), str(trained_run.model_dir), *options, "--device", "cpu"]
    progress = threading.Event()
    error: list[bytes] = []

    def read_standard_error() -> None:  # all of it, so that the command never waits on a full pipe
        assert process.stderr is not None
        while chunk := process.stderr.read1():
            error.append(chunk)
            if b"translating" in chunk:
                progress.set()

    with source.open("rb") as stdin:
        process = subprocess.Popen(
            command,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
            preexec_fn=as_in_a_terminal,
        )
    assert process.stdout is not None
    reader = threading.Thread(target=read_standard_error, daemon=True)
    reader.start()
    try:
        if waited_for == "progress":
            assert progress.wait(WAIT), "translating never started"
        else:
            assert line_within(process.stdout, WAIT) is not None  # translating is under way
        process.send_signal(sent)
        threading.Thread(target=process.stdout.read, daemon=True).start()  # never a full pipe either
        process.wait(timeout=WAIT)
        reader.join(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
    text = b"".join(error).decode()
    assert process.returncode == status, text[-2000:]
    assert last_line(text) == said and "Traceback" not in text


@pytest.mark.slow  # a command in a fresh interpreter
def test_a_reader_that_goes_away_ends_translation_quietly(trained_run, tmp_path: Path) -> None:
    """`seq 1500 | vaswani-translate MODEL | head -1` ended with a BrokenPipeError traceback."""
    translate = f"{console('vaswani-translate')} {trained_run.model_dir} --num_beams 1 --device cpu"
    script = (
        f'seq 1500 | {translate} 2> stderr.txt | head -1 > first.txt; echo "${{PIPESTATUS[1]}}" > status.txt'
    )
    subprocess.run(["bash", "-c", script], cwd=tmp_path, env=ENV, timeout=WAIT, check=True)
    error = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert (tmp_path / "first.txt").read_text(encoding="utf-8").count("\n") == 1
    assert (tmp_path / "status.txt").read_text(encoding="utf-8").strip() == "141", error[-2000:]
    assert "Traceback" not in error and "BrokenPipeError" not in error


@pytest.mark.slow
def test_ctrl_c_during_training_says_how_to_resume_and_resume_finishes_the_run(tmp_path: Path) -> None:
    flags = [item for name, path in tatoeba_files(tmp_path, 150).items() for item in (f"--{name}", path)]
    flags += ["--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"]
    flags += ["--max_steps", "40", "--warmup_steps", "2", "--save_steps", "4", "--average_last", "1"]
    flags += ["--dev_size", "0", "--eval_steps", "0", "--num_beams", "1", "--examples", "A dog."]
    run = tmp_path / "run"
    command = [console("vaswani-train"), *flags, "--output_dir", str(run)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd=tmp_path,
        preexec_fn=as_in_a_terminal,
    )
    try:
        deadline = time.monotonic() + WAIT
        while not list(run.glob("checkpoint-*/trainer_state.json")) and process.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # training is under way, a checkpoint written
        _, error = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
    error = error.decode()
    assert process.returncode == 130, error[-2000:]
    assert last_line(error) == f"interrupted; the run can continue: the same command with --resume ({run})"
    assert "Traceback" not in error and not (run / "final").exists()
    resumed = subprocess.run(
        [*command, "--resume"], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=WAIT
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "--resume: continuing from checkpoint-" in resumed.stderr
    assert json.loads((run / "final" / "scores.json").read_text(encoding="utf-8"))["num_sentences"] == 5


@pytest.mark.slow  # a command in a fresh interpreter per redirection
@pytest.mark.parametrize("redirect", [">>", ">", "< in.en >>"])
def test_output_onto_its_own_input_is_refused_before_anything_is_translated(
    trained_run, tmp_path: Path, redirect: str
) -> None:
    """`vaswani-translate MODEL in.en >> in.en` translated its own output without end, and `> in.en` translated
    the file the shell had just emptied and exited 0."""
    (tmp_path / "in.en").write_text("I love you.\nWhere is the station?\n", encoding="utf-8")
    before = (tmp_path / "in.en").read_bytes()
    argument = "" if redirect.startswith("<") else "in.en"
    translate = (
        f"{console('vaswani-translate')} {trained_run.model_dir} --num_beams 1 --device cpu {argument}"
    )
    completed = subprocess.run(
        ["bash", "-c", f"{translate} {redirect} in.en"],
        cwd=tmp_path, env=ENV, timeout=WAIT, capture_output=True, text=True,
    )  # fmt: skip
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "which is also the input" in completed.stderr and "Traceback" not in completed.stderr
    if redirect != ">":  # `>` empties the file before the command starts: nothing more may be written
        assert (tmp_path / "in.en").read_bytes() == before
    else:
        assert (tmp_path / "in.en").read_bytes() == b""
