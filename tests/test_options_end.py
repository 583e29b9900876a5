"""`--` ends the options in every command, as in every Unix tool: what follows is positional even when it starts
with "-" (a model folder, an input file or a sentence named "-m")."""

from pathlib import Path

import pytest

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.cli import evaluate, plot_attention
from vaswani_transformer.cli import translate as translate_cli


@pytest.mark.parametrize(
    ("argv", "model", "files"),
    [
        (["--", "-m"], "-m", []),  # refused before: "the following arguments are required: model, files"
        (["--num_beams", "1", "--", "-m", "-x"], "-m", ["-x"]),
        (["--", "model", "-x", "--"], "model", ["-x", "--"]),  # a second `--` is a file's name
        (["model", "--num_beams", "1", "--", "-x"], "model", ["-x"]),
        (["model", "a.en", "--num_beams", "1", "b.en"], "model", ["a.en", "b.en"]),  # no `--`: as before
    ],
)
def test_translate_takes_what_follows_the_separator_as_its_model_and_files(
    argv: list[str], model: str, files: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in files:
        Path(name).write_text("a b\n", encoding="utf-8")
    args, _ = translate_cli.parse_args(argv)
    assert args.model == model and args.files == [Path(name) for name in files]
    assert args.num_beams == (1 if "--num_beams" in argv else None)


def test_translate_translates_a_model_and_a_file_named_like_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], letter_tokenizer
) -> None:
    monkeypatch.chdir(tmp_path)
    VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=30)).save_pretrained("-m")
    letter_tokenizer.save_pretrained("-m")
    Path("-x").write_text("a b c\n\nd e\n", encoding="utf-8")
    assert translate_cli.main(["--num_beams", "1", "--device", "cpu", "--", "-m", "-x"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # one line per input line


def test_other_commands_end_their_options_at_the_separator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = plot_attention.parse_args(["--kinds", "cross", "--", "model", "-m is not an option"])
    assert (args.model, args.sentence, args.kinds) == ("model", "-m is not an option", ["cross"])
    args = plot_attention.parse_args(["--", "-m", "-x"])
    assert (args.model, args.sentence) == ("-m", "-x")
    args = plot_attention.parse_args(["--layer", "2", "--", "-m", "-x"])
    assert (args.model, args.sentence, args.layer) == ("-m", "-x", 2)
    monkeypatch.chdir(tmp_path)
    Path("test.en").write_text("a\n", encoding="utf-8")
    Path("test.de").write_text("a\n", encoding="utf-8")
    args = evaluate.parse_args(["--source", "test.en", "--references", "test.de", "--", "-m"])[0]
    assert args.model_dir == Path("-m")
