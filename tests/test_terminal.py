"""`vaswani-translate` at a terminal and on paragraphs: a typed line is answered as soon as it ends, and
--split_sentences translates each sentence of a line apart, joined back with the line's own spacing."""

import fcntl
import io
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.conftest import SENTENCES
from tests.test_streaming import ENV, WAIT, line_within
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.engines import EngineOptions, load_engine


@pytest.mark.slow  # a command in a fresh interpreter
def test_a_line_typed_at_a_terminal_is_translated_as_soon_as_it_ends(random_folder: Path) -> None:
    """Before, a terminal's lines waited for a buffer of 128 (or Ctrl-D): this read timed out."""
    expected = load_engine(random_folder, EngineOptions(device="cpu")).translate([SENTENCES[0]], num_beams=1)[
        0
    ]
    controller, terminal = pty.openpty()
    command = [
        sys.executable,
        "-m",
        "vaswani_transformer",
        "translate",
        str(random_folder),
        "--num_beams",
        "1",
    ]
    process = subprocess.Popen(
        [*command, "--device", "cpu"],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )
    os.close(terminal)
    try:
        assert process.stdout is not None
        os.write(controller, f"{SENTENCES[0]}\n".encode())
        line = line_within(process.stdout, WAIT)
        assert line is not None, "no translation while the terminal stayed open"
        assert process.poll() is None
        assert line.decode().removesuffix("\n") == expected
        os.write(controller, b"\x04")  # Ctrl-D: the end of the input
        assert process.wait(timeout=WAIT) == 0
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)


def test_split_sentences_translates_each_sentence_and_keeps_the_line_s_spacing(
    random_folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, a paragraph on one line came out as one run-on sentence."""
    lines = [f"{SENTENCES[0]}  {SENTENCES[1]}", "", SENTENCES[2]]
    raw = io.BytesIO("".join(f"{line}\n" for line in lines).encode())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw, encoding="utf-8"))
    arguments = [str(random_folder), "--num_beams", "1", "--device", "cpu", "--split_sentences", "en"]
    assert translate_cli.main(arguments) == 0
    engine = load_engine(random_folder, EngineOptions(device="cpu"))
    one, two, three = engine.translate(SENTENCES[:3], num_beams=1)  # the buffer's sentences, decoded together
    assert capsys.readouterr().out.splitlines() == [f"{one}  {two}", "", three]


def test_split_sentences_takes_the_language_the_model_records(
    trained_run, random_folder: Path, tmp_path: Path, capsys
) -> None:
    unrecorded = Path(shutil.copytree(random_folder, tmp_path / "model"))  # a folder that records no pair
    config = json.loads((unrecorded / "config.json").read_text(encoding="utf-8"))
    config.pop("langs")
    (unrecorded / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert translate_cli.main([str(unrecorded), "--split_sentences", "--device", "cpu"]) == 2
    assert "does not record its source language: give it, --split_sentences en." in capsys.readouterr().err
    assert (
        translate_cli.split_language(
            translate_cli.parse_args([str(trained_run.model_dir), "--split_sentences"])[0]
        )
        == "en"
    )


def shown(raw: str) -> list[str]:
    """The lines a terminal shows for `raw`: each carriage return goes back to the line's start, overwriting."""
    lines = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        cells: list[str] = []
        column = 0
        for character in line:
            if character == "\r":
                column = 0
                continue
            cells[column : column + 1] = [character]
            column += 1
        lines.append("".join(cells).rstrip())
    return lines


@pytest.mark.slow  # a command in a fresh interpreter
def test_translations_get_lines_of_their_own_beside_the_progress_bar_on_one_terminal(
    random_folder: Path, tmp_path: Path
) -> None:
    """Standard output and standard error on one terminal: the translations shared their line with the bar."""
    source = tmp_path / "in.en"
    source.write_text("\n".join(SENTENCES[:4]) + "\n", encoding="utf-8")
    controller, terminal = pty.openpty()
    # 120 columns: room for the bar
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    command = [sys.executable, "-m", "vaswani_transformer", "translate", str(random_folder), str(source)]
    process = subprocess.Popen(
        [*command, "--num_beams", "1", "--buffer_lines", "1", "--device", "cpu"],
        stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, env=ENV,
    )  # fmt: skip
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=WAIT) == 0
    engine = load_engine(random_folder, EngineOptions(device="cpu"))
    expected = [engine.translate([sentence], num_beams=1)[0] for sentence in SENTENCES[:4]]  # a buffer each
    lines = shown(output.decode("utf-8", errors="replace"))
    assert all(translation in lines for translation in expected), lines
    assert "translating" in output.decode("utf-8", errors="replace")  # the bar was there
