"""One rule tells a local path from a Hub id, for models (`check_model_name`) and corpora (`load_parallel`, the
training flags): a missing local name is an error naming it, never a Hub request."""

from pathlib import Path

import pytest

from vaswani_transformer.data import load_parallel
from vaswani_transformer.evaluation import check_model_name
from vaswani_transformer.files import is_local_path


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
