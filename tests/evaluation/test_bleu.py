"""BLEU: the offline evaluate metric, sacreBLEU, Multi30k's Moses preprocessing and tokenised BLEU."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu

from vaswani_transformer.evaluation.bleu import (
    SACREBLEU_METRIC_PATH,
    load_bleu_metric,
    moses_tokenize,
    sacre_bleu,
    split_compound_hyphens,
    tokenized_bleu,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SCORE_FIELDS = ("score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len")


def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file without their newlines."""
    return path.read_text(encoding="utf-8").splitlines()


def corrupted(lines: list[str]) -> list[str]:
    """Imperfect 'translations': every third line word-reversed, the others missing their last word."""
    return [
        " ".join(reversed(line.split())) if i % 3 == 0 else line.rsplit(" ", 1)[0]
        for i, line in enumerate(lines)
    ]


@pytest.fixture(scope="module")
def bleu_metric():
    """The packaged evaluate metric, held in memory."""
    return load_bleu_metric(keep_in_memory=True)


@pytest.fixture(scope="module")
def german_references(shared_data: Path) -> list[str]:
    """The first 300 raw German captions of Multi30k test_2016_flickr."""
    return read_lines(shared_data / "multi30k" / "test_2016_flickr.de")[:300]


def test_metric_path_points_into_the_package() -> None:
    assert Path(SACREBLEU_METRIC_PATH).is_file()
    assert Path(SACREBLEU_METRIC_PATH).parents[2] == REPO_ROOT / "vaswani_transformer" / "evaluation"


@pytest.mark.parametrize("lowercase", [False, True])
def test_evaluate_metric_equals_sacrebleu(bleu_metric, german_references: list[str], lowercase: bool) -> None:
    hypotheses = corrupted(german_references)
    expected = sacrebleu.corpus_bleu(hypotheses, [german_references], lowercase=lowercase)
    signing_bleu = sacrebleu.BLEU(lowercase=lowercase)
    signing_bleu.corpus_score(hypotheses, [german_references])

    result = bleu_metric.compute(predictions=hypotheses, references=german_references, lowercase=lowercase)

    assert 10 < expected.score < 90
    assert {field: result[field] for field in SCORE_FIELDS} == {f: getattr(expected, f) for f in SCORE_FIELDS}
    assert result["signature"] == str(signing_bleu.get_signature())
    assert ("|case:lc|" in result["signature"]) == lowercase
    assert sacre_bleu(hypotheses, german_references, lowercase=lowercase) == result


def test_evaluate_metric_takes_several_references_per_prediction(bleu_metric, german_references) -> None:
    hypotheses = corrupted(german_references[:100])
    first, second = german_references[:100], german_references[100:200]
    expected = sacrebleu.corpus_bleu(hypotheses, [first, second], tokenize="intl")

    references = [list(pair) for pair in zip(first, second, strict=True)]

    result = bleu_metric.compute(predictions=hypotheses, references=references, tokenize="intl")

    assert result["score"] == pytest.approx(expected.score, abs=1e-9)
    assert result["signature"].startswith("nrefs:2|") and "tok:intl" in result["signature"]


@pytest.mark.slow
def test_evaluate_metric_loads_from_a_fresh_cache_fully_offline(tmp_path: Path) -> None:
    hypotheses, references = ["Zwei Hunde spielen im Schnee ."], ["Zwei Hunde rennen im Schnee ."]
    script = (
        "import json, sys; from vaswani_transformer.evaluation.bleu import load_bleu_metric; "
        "print(json.dumps(load_bleu_metric().compute(predictions=sys.argv[1:2], references=sys.argv[2:3])))"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    completed = subprocess.run(
        [sys.executable, "-c", script, *hypotheses, *references], env=env, capture_output=True, text=True
    )

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.splitlines()[-1]) == sacre_bleu(hypotheses, references)
    assert any((tmp_path / "modules").rglob("sacrebleu_offline.py"))


@pytest.mark.parametrize("split", ["test_2016_flickr", "val"])
@pytest.mark.parametrize("lang", ["de", "en"])
def test_moses_tokenize_reproduces_official_multi30k_files(shared_data: Path, split: str, lang: str) -> None:
    raw = read_lines(shared_data / "multi30k" / f"{split}.{lang}")
    official = read_lines(shared_data / "multi30k-tok" / f"{split}.lc.norm.tok.{lang}")

    ours = moses_tokenize(raw, lang)

    mismatches = [(mine, ref) for mine, ref in zip(ours, official, strict=True) if mine != ref]

    assert mismatches == []


def test_moses_tokenize_moves_a_final_period_out_of_german_quotes() -> None:
    # normalize-punctuation.perl -l de: s/(\.+)\"(\s*[^<])/\"$1$2/g also fires before the line's newline.
    assert moses_tokenize(['Er sagt: "Hallo."'], "de") == ["er sagt : &quot; hallo &quot; ."]
    assert moses_tokenize(['He says: "Hello."'], "en", lowercase=False) == ["He says : &quot; Hello . &quot;"]


@pytest.mark.parametrize("lang", ["de", "en"])
def test_raw_references_as_hypotheses_score_100_against_official_tokenised_references(
    shared_data: Path, lang: str
) -> None:
    raw = read_lines(shared_data / "multi30k" / f"test_2016_flickr.{lang}")
    official = read_lines(shared_data / "multi30k-tok" / f"test_2016_flickr.lc.norm.tok.{lang}")

    result = tokenized_bleu(raw, official, lang=lang)

    assert result["score"] >= 99.0
    assert result["ref_len"] == sum(len(line.split()) for line in official)
    assert "case:lc" in result["signature"] and "tok:none" in result["signature"]
    assert tokenized_bleu(raw, official, lang=lang, lowercase=False)["score"] < 95.0


def test_tokenized_bleu_matches_hand_computed_ngram_precisions() -> None:
    # hypothesis: "the cat sat on the mat today" against "the cat is on the mat today" (7 tokens each).
    # 1-grams: all but "sat" match: 6/7. 2-grams: the cat, on the, the mat, mat today: 4/6.
    # 3-grams: on the mat, the mat today: 2/5. 4-grams: on the mat today: 1/4. Equal lengths: BP = 1.
    expected_score = 100 * (6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** (1 / 4)

    result = tokenized_bleu(
        ["the cat sat on the mat today"],
        ["the cat is on the mat today"],
        lang="en",
        hypotheses_tokenized=True,
    )

    assert result["counts"] == [6, 4, 2, 1]
    assert result["totals"] == [7, 6, 5, 4]
    assert result["bp"] == pytest.approx(1.0)
    assert result["score"] == pytest.approx(expected_score)


def test_tokenized_bleu_applies_the_brevity_penalty() -> None:
    # "on the mat today" is all found in the 7-token reference: precisions 1, BP = exp(1 - 7/4).
    result = tokenized_bleu(
        ["on the mat today"], ["the cat is on the mat today"], lang="en", hypotheses_tokenized=True
    )

    assert result["precisions"] == [100.0] * 4
    assert result["score"] == pytest.approx(100 * math.exp(1 - 7 / 4))


def test_bleu_rejects_misaligned_inputs() -> None:
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        sacre_bleu(["a b", "c d"], ["a b"])


def test_split_compound_hyphens_on_known_strings() -> None:
    # Example from https://nlp.stanford.edu/projects/nmt/ quoted in tensor2tensor's get_ende_bleu.sh.
    assert split_compound_hyphens("rich-text format") == "rich ##AT##-##AT## text format"
    # Perl's s{(\S)-(\S)}{...}g resumes after the consumed right character, so a-b-c splits only once.
    assert split_compound_hyphens("a-b-c") == "a ##AT##-##AT## b-c"
    assert split_compound_hyphens("Verkehrs- und -aufkommen - x") == "Verkehrs- und -aufkommen - x"


@pytest.mark.skipif(shutil.which("perl") is None, reason="needs perl")
def test_split_compound_hyphens_matches_the_perl_one_liner_on_newstest2014(shared_data: Path) -> None:
    lines = read_lines(shared_data / "wmt14-newstest" / "newstest2014.sacrebleu.de")
    perl = subprocess.run(
        ["perl", "-ple", "s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
    )

    ours = [split_compound_hyphens(line) for line in lines]

    assert ours == perl.stdout.splitlines()
    assert sum(split != line for split, line in zip(ours, lines, strict=True)) > 500


def test_tokenized_bleu_splits_compounds_in_hypotheses_and_references() -> None:
    hypotheses, references = ["a rich-text file"], ["a rich-media file"]

    plain = tokenized_bleu(hypotheses, references, lang="en", hypotheses_tokenized=True)
    split = tokenized_bleu(hypotheses, references, lang="en", hypotheses_tokenized=True, split_compounds=True)

    # Unsplit: "a", "file" of 3 tokens match. Split on both sides: "a", "rich", "##AT##-##AT##", "file" of 5.
    assert (plain["counts"][0], plain["totals"][0]) == (2, 3)
    assert (split["counts"][0], split["totals"][0]) == (4, 5)


def test_bleu_of_nothing_is_an_error_not_an_index_error() -> None:
    """An empty test set no longer reaches sacreBLEU, which raised IndexError: it is refused first."""
    for score in (lambda: sacre_bleu([], []), lambda: tokenized_bleu([], [], lang="de")):
        with pytest.raises(ValueError, match="no sentences to score"):
            score()
