"""A run's language pair comes from the data (flags, else the corpus files' suffixes, else the embedded corpus),
and a contradiction or a pair nothing tells is refused before any work, naming the flags."""

import json
from pathlib import Path

import pytest

from vaswani_transformer.cli.train import main, parse_options
from vaswani_transformer.training.languages import corpus_languages, suffix_language


@pytest.mark.parametrize(
    "name, code",
    [("train.fr", "fr"), ("corpus/train.pt_BR", "pt_BR"), ("train.fr.gz", "fr"), ("train.txt", None),
     ("train.source", None), ("train.tsv", None), ("train", None), ("test_2016_flickr.lc.norm.tok.de", "de")],
)  # fmt: skip
def test_a_files_suffix_names_its_language_only_when_it_is_a_language_code(
    name: str, code: str | None
) -> None:
    assert suffix_language(name) == code


def french_english(tmp_path: Path, *, source: str = "fr", target: str = "en") -> list[str]:
    flags = []
    for split in ("train", "test"):
        for side, language in (("source", source), ("target", target)):
            path = tmp_path / f"{split}.{language}"
            path.write_text("Bonjour.\n" if language == "fr" else "Hello.\n", encoding="utf-8")
            flags += [f"--{split}_{side}", str(path)]
    return flags


def test_a_french_english_corpus_is_french_to_english_without_flags(tmp_path: Path) -> None:
    options = parse_options([*french_english(tmp_path), "--cuda_section", "false", "--fit_to_steps", "5000"])
    assert (options.source_lang, options.target_lang) == ("fr", "en")


def test_the_embedded_corpus_is_english_to_german_and_refuses_another_direction() -> None:
    options = parse_options(["--cuda_section", "false", "--fit_to_steps", "5000"])
    assert (options.source_lang, options.target_lang) == ("en", "de")
    with pytest.raises(ValueError, match="--source_lang de contradicts the embedded Tatoeba corpus"):
        parse_options(["--source_lang", "de", "--target_lang", "en", "--fit_to_steps", "5000"])


def test_flags_that_contradict_the_suffixes_are_refused_with_exit_2_and_nothing_written(
    tmp_path: Path, capsys
) -> None:
    run = tmp_path / "run"
    flags = [
        *french_english(tmp_path),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--output_dir",
        str(run),
    ]
    assert main([*flags, "--fit_to_steps", "5000"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --source_lang en contradicts the suffixes of --train_source")
    assert "which say fr→en: give --source_lang fr" in error
    assert not run.exists()


def test_a_corpus_whose_names_say_nothing_needs_the_flags(tmp_path: Path) -> None:
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("Bonjour.\tHello.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="Give --source_lang and --target_lang"):
        corpus_languages({"train_source": str(tsv), "test_source": str(tsv)}, None, None, None)
    assert corpus_languages({"train_source": str(tsv)}, None, "fr", "en") == ("fr", "en")


def test_splits_that_name_different_pairs_and_a_hub_config_of_other_languages_are_refused() -> None:
    files = {
        "train_source": "train.fr",
        "train_target": "train.en",
        "test_source": "t.es",
        "test_target": "t.en",
    }
    with pytest.raises(ValueError, match="name different language pairs"):
        corpus_languages(files, None, None, None)
    with pytest.raises(
        ValueError, match="--hub_config de-en names the languages de and en, not the run's fr→en"
    ):
        corpus_languages({"train_source": "wmt/wmt14"}, "de-en", "fr", "en")
    assert corpus_languages({"train_source": "wmt/wmt14", "test_source": "n.en", "test_target": "n.de"}, "de-en",
                            None, None) == ("en", "de")  # fmt: skip


def test_the_run_record_keeps_the_datas_pair(tmp_path: Path) -> None:
    from vaswani_transformer.training.run_folder import write_options

    options = parse_options([*french_english(tmp_path), "--cuda_section", "false", "--fit_to_steps", "5000"])
    write_options(options, tmp_path / "folder")
    record = json.loads((tmp_path / "folder" / "train_options.json").read_text(encoding="utf-8"))
    assert (record["source_lang"], record["target_lang"]) == ("fr", "en")
