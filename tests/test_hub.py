"""Sharing a trained model: the model card, the --local_dir folder, the upload, and loading without the package."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import WITHOUT_THE_PACKAGE
from vaswani_transformer import card_text
from vaswani_transformer.cli import push
from vaswani_transformer.decoding.sentences import recorded_languages
from vaswani_transformer.decoding.translate import translate
from vaswani_transformer.evaluation import load_for_decoding
from vaswani_transformer.evaluation.verification import verify_model_folder
from vaswani_transformer.hub import build_model_card, model_files, write_hub_folder
from vaswani_transformer.modeling.saving_vaswani_transformer import FOLDER_CODE

SENTENCES = ["I love you.", "Where is the train station?", "Tom is reading a book in the garden."]

# Runs in a fresh interpreter in which `import vaswani_transformer` fails: only the folder's remote code can work.
WITHOUT_PACKAGE = (
    WITHOUT_THE_PACKAGE
    + r"""
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerFast, pipeline

folder, sentences = sys.argv[1], json.loads(sys.argv[2])
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
translations = []
for sentence in sentences:
    output = model.generate(**tokenizer([sentence], return_tensors="pt"))
    translations.append(tokenizer.decode(output[0], skip_special_tokens=True).strip())
batch = tokenizer(sentences, padding=True, return_tensors="pt")
logits = model(**batch, decoder_input_ids=batch["input_ids"][:, :4]).logits
translator = pipeline("vaswani-translation", model=folder, trust_remote_code=True)
body = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
hidden = body(**batch, decoder_input_ids=batch["input_ids"][:, :4]).last_hidden_state
print(json.dumps({
    "translations": translations,
    "logits": logits.flatten().tolist(),
    "hidden": hidden.flatten().tolist(),
    "pipeline": [result["translation_text"] for result in translator(sentences)],
    "model_class": type(model).__module__ + "." + type(model).__name__,
    "body_class": type(body).__name__,
    "pipeline_class": type(translator).__name__,
    # the tokenizer without trust_remote_code (stdin is closed: a y/N question would fail the script)
    "plain_tokenizer_ids": PreTrainedTokenizerFast.from_pretrained(folder)(sentences)["input_ids"],
    "tokenizer_ids": tokenizer(sentences)["input_ids"],
}))
"""
)


def card_metadata(text: str) -> dict:
    return yaml.safe_load(text.split("---")[1])


def test_model_card_is_filled_from_config_options_and_scores(trained_run) -> None:
    model_dir = trained_run.model_dir
    scores = json.loads((model_dir / "scores.json").read_text())
    run = json.loads((model_dir / "training_run.json").read_text())
    card = build_model_card(model_dir, "tester/tatoeba-mini")
    text = str(card)
    assert "{{" not in text and "{%" not in text
    metadata = card_metadata(text)
    assert metadata["language"] == ["en", "de"]
    # the pair travels in config.json (the folder's pipeline splits sentences by it), as in every later save
    assert json.loads((model_dir / "config.json").read_text())["langs"] == ["en", "de"]
    assert metadata["license"] == "apache-2.0"
    assert {"translation", "custom_code"} <= set(metadata["tags"])
    assert "pipeline_tag" not in metadata and metadata["metrics"] == [
        "bleu"
    ]  # transformers 5 has no such task
    assert "<!--" not in text and "Jinja" not in text  # the template's own comment is not published
    assert "Trained by `vaswani-train` with label smoothing 0.1" in text and "base_model" not in metadata
    results = metadata["model-index"][0]["results"]
    sacre = next(m for r in results for m in r["metrics"] if m["name"] == "sacreBLEU")
    assert sacre["value"] == round(scores["sacrebleu"]["score"], 2)
    assert sacre["config"] == scores["sacrebleu"]["signature"]
    assert results[0]["task"]["type"] == "translation"
    model, _ = load_for_decoding(model_dir, device="cpu")
    assert f"| Parameters | {model.num_parameters():,} |" in text
    assert "beam 2" in text  # the decoding actually used for the scores (--num_beams 2), not the default
    assert "CC-BY 2.0" in text and "tatoeba.org" in text  # data credit
    assert run["hardware"] in text and f"{run['steps']:,} steps" in text
    # what was averaged, not the --average_last 5 asked for: the miniature saved three checkpoints
    assert run["final_weights"] == {
        "made_by": "average",
        "checkpoints": ["checkpoint-20", "checkpoint-40", "checkpoint-60"],
    }
    assert "the average of the last 3 checkpoints (§6.1: checkpoint-20, checkpoint-40, checkpoint-60)" in text
    assert f"{run['mixed_precision']} ({run['mixed_precision_chosen_by']})" in text  # the precision, and why
    assert 'AutoModelForSeq2SeqLM.from_pretrained("tester/tatoeba-mini", trust_remote_code=True)' in text


def test_main_job_card_names_its_data_cites_in_bibtex_and_states_its_limits(trained_run, monkeypatch) -> None:
    """The main job's card has a `datasets` entry for the recipe's corpus, BibTeX, Limitations that name
    what users meet (short sentences, ALL CAPS, run-on lines, its pair, its length penalty), and an install that
    works (the package is not on PyPI)."""
    text = str(build_model_card(trained_run.model_dir, "tester/tatoeba-mini"))
    metadata = card_metadata(text)
    assert metadata["datasets"] == ["Helsinki-NLP/tatoeba"] and metadata["language"] == ["en", "de"]
    assert metadata["model-index"][0]["results"][0]["dataset"]["type"] == "Helsinki-NLP/tatoeba"
    assert "```bibtex\n@inproceedings{vaswani2017attention," in text
    limitations = text.split("## Limitations")[1].split("## ")[0]
    assert "short everyday sentences" in limitations and "ALL-CAPS input degenerates" in limitations
    assert "one run-on sentence" in limitations and "`vaswani-translate --split_sentences`" in limitations
    assert "Translates English into German only" in limitations
    assert "at most 128 tokens a side" in limitations  # the recipe's --max_length
    chosen = json.loads((trained_run.model_dir / "generation_config.json").read_text())["length_penalty"]
    assert f"((5 + |Y|) / 6)^α (α = {chosen})" in limitations  # the α chosen on dev, as the Usage states
    tried = json.loads((trained_run.model_dir / "scores.json").read_text())["length_penalty_on_dev"]
    assert max(tried, key=tried.get) == str(chosen)
    assert "α chosen after training by dev sacreBLEU, as §6.1 chose it on the development set" in text
    assert "pip install vaswani_transformer" not in text and "pip install 'vaswani_transformer[" not in text
    assert "`pip install -e .` in a clone of its repository, as it is not on PyPI" in text
    assert "`pip install -e '.[serve]'` in a clone" in text
    # where the package's metadata names its repository, the card installs from it
    monkeypatch.setattr(card_text, "_repository_url", lambda: "https://example.org/vaswani_transformer.git")
    assert card_text.install_command("serve") == (
        "`pip install 'vaswani_transformer[serve] @ git+https://example.org/vaswani_transformer.git'`"
    )


def test_the_card_s_words_on_the_tatoeba_sentences_hold_for_the_embedded_corpus() -> None:
    """The Limitations' "a median of 6 English words, 89% under 10", counted in the corpus itself."""
    import gzip
    import statistics

    from vaswani_transformer.provenance import TATOEBA_CORPUS

    corpus = Path(card_text.__file__).parent / "data" / "embedded" / "tatoeba_en_de" / "deu.txt.gz"
    with gzip.open(corpus, "rt", encoding="utf-8") as lines:
        words = [len(line.split("\t")[0].split()) for line in lines if line.strip()]
    under_10 = round(100 * sum(count < 10 for count in words) / len(words))
    assert (
        f"a median of {statistics.median(words):g} English words, {under_10}% under 10" in TATOEBA_CORPUS.kind
    )


@pytest.mark.slow  # a fresh interpreter
def test_local_dir_loads_and_translates_identically_without_the_package(trained_run, tmp_path: Path) -> None:
    saved = json.loads((trained_run.model_dir / "config.json").read_text())  # the run's own folder, too
    assert saved["auto_map"]["AutoModel"] == "modeling_vaswani_transformer.VaswaniTransformerModel"
    folder = tmp_path / "hub"
    assert (
        push.main(
            [str(trained_run.model_dir), "--repo_id", "tester/tatoeba-mini", "--local_dir", str(folder)]
        )
        == 0
    )
    names = {path.name for path in folder.iterdir()}
    # the weights get a new file's permissions (safetensors writes 0600)
    (tmp_path / "new-file").write_text("")
    assert (folder / "model.safetensors").stat().st_mode == (tmp_path / "new-file").stat().st_mode
    code = set(FOLDER_CODE)  # the model, its decoding, the pipeline and the handler
    assert (
        set(model_files(trained_run.model_dir)) | code | {"README.md", "scores.json", "training_curve.png"}
        <= names
    )
    assert not names & {"hypotheses.txt", "optimizer.pt", "training_args.bin"}  # no pickles, no test outputs
    required = (folder / "requirements.txt").read_text().splitlines()  # what Inference Endpoints installs
    assert [line.split(">")[0].split("<")[0] for line in required] == ["torch", "transformers", "sentencex"]
    assert any(line.startswith("transformers") and "<6" in line for line in required)
    model, tokenizer = load_for_decoding(trained_run.model_dir, device="cpu")
    in_float32 = translate(SENTENCES, model, tokenizer, dtype=torch.float32)  # as plain generate() runs
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGE, str(folder), json.dumps(SENTENCES)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Do you wish to run the custom code" not in completed.stdout  # nothing asked
    result_line = [line for line in completed.stdout.splitlines() if line.startswith('{"translations"')]
    assert result_line, completed.stdout[:1000]
    loaded = json.loads(result_line[0])
    assert loaded["model_class"].startswith("transformers_modules.")  # the folder's code, not the package's
    assert loaded["model_class"].endswith("VaswaniTransformerForConditionalGeneration")
    assert loaded["body_class"] == "VaswaniTransformerModel"
    assert loaded["pipeline_class"] == "VaswaniTranslationPipeline"
    assert loaded["plain_tokenizer_ids"] == loaded["tokenizer_ids"]
    assert loaded["translations"] == in_float32
    assert loaded["pipeline"] == in_float32  # the folder's pipeline decodes float32 on a CPU
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=batch["input_ids"][:, :4]).logits
        hidden = model.model(**batch, decoder_input_ids=batch["input_ids"][:, :4]).last_hidden_state
    torch.testing.assert_close(torch.tensor(loaded["logits"]), logits.flatten(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.tensor(loaded["hidden"]), hidden.flatten(), rtol=1e-5, atol=1e-5)


def test_local_dir_refuses_a_non_empty_folder_and_an_incomplete_model(
    trained_run, tmp_path: Path, capsys
) -> None:
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("keep me")
    args = ["--repo_id", "tester/x", "--local_dir"]
    assert push.main([str(trained_run.model_dir), *args, str(occupied)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (occupied / "notes.txt").read_text() == "keep me"
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    (incomplete / "config.json").write_text((trained_run.model_dir / "config.json").read_text())
    assert push.main([str(incomplete), *args, str(tmp_path / "out")]) == 2
    assert "model.safetensors" in capsys.readouterr().err and not (tmp_path / "out").exists()
    without_its_sibling = tmp_path / "without-sibling"  # the model file imports it: remote code would break
    shutil.copytree(trained_run.model_dir, without_its_sibling)
    (without_its_sibling / "generation_vaswani_transformer.py").unlink()
    assert push.main([str(without_its_sibling), *args, str(tmp_path / "out")]) == 2
    assert "generation_vaswani_transformer.py missing" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    linked_out = tmp_path / "linked-out"  # a push once followed it and published its target
    shutil.copytree(trained_run.model_dir, linked_out)
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({"sacrebleu": {"score": 99.0}, "private": "not for the Hub"}))
    (linked_out / "scores.json").unlink()
    (linked_out / "scores.json").symlink_to(secret)
    assert push.main([str(linked_out), *args, str(tmp_path / "out")]) == 2
    assert "scores.json link to files outside the folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        push.main(
            [str(trained_run.model_dir), "--repo_id", "not a repo id", "--local_dir", str(tmp_path / "o")]
        )


def test_train_push_to_hub_sends_the_folder_in_one_commit(trained_run, tmp_path: Path) -> None:
    """The miniature main job ran with --push_to_hub: the (fake) Hub got the repo and exactly the folder."""
    requests = [(method, path) for method, path, _ in trained_run.hub.requests]
    assert ("POST", "/api/repos/create") in requests
    (path, header, files), = trained_run.hub.commits()  # fmt: skip
    assert path == "/api/models/tester/tatoeba-mini/commit/main"
    assert "final" in header["summary"]
    expected = tmp_path / "expected"
    write_hub_folder(trained_run.model_dir, expected, "tester/tatoeba-mini")
    assert set(files) == {file.name for file in expected.iterdir()}
    for name in ("model.safetensors", "config.json", "tokenizer.json", "pipeline_vaswani_transformer.py"):
        assert files[name] == (expected / name).read_bytes()
    assert card_metadata(files["README.md"].decode())["model-index"]


def test_push_cli_private_repo_on_a_branch(trained_run, fake_hub, capsys) -> None:
    status = push.main([
        str(trained_run.model_dir), "--repo_id", "tester/private-mini", "--private", "--revision", "v1",
        "--commit_message", "first release",
    ])  # fmt: skip
    hub = fake_hub
    assert status == 0
    created = next(json.loads(body) for method, path, body in hub.requests if path == "/api/repos/create")
    assert created == {"name": "private-mini", "organization": "tester", "visibility": "private"}
    assert ("POST", "/api/models/tester/private-mini/branch/v1") in [(m, p) for m, p, _ in hub.requests]
    (path, header, files), = hub.commits()  # fmt: skip
    assert path.endswith("/commit/v1") and header["summary"] == "first release"
    assert "pushed" in capsys.readouterr().out


def test_sharing_options_are_checked_before_training(monkeypatch, tmp_path: Path) -> None:
    from vaswani_transformer.training import TrainOptions, check_inputs, checks

    with pytest.raises(ValueError, match="Repo id"):
        check_inputs(
            TrainOptions.from_recipe("tatoeba", output_dir=tmp_path / "run", push_to_hub="not a repo id")
        )
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))  # no stored login either
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "stored_tokens"))
    with pytest.raises(ValueError, match="needs a Hub token: run `hf auth login` or set HF_TOKEN"):
        check_inputs(
            TrainOptions.from_recipe("tatoeba", output_dir=tmp_path / "run", push_to_hub="tester/model")
        )
    # a machine without TensorBoard: transformers finds no integration installed
    monkeypatch.setattr(checks.integration_utils, "get_available_reporting_integrations", list)
    with pytest.raises(
        ValueError,
        match="--report_to tensorboard needs tensorboard, which is not installed: pip install tensorboard",
    ):
        check_inputs(
            TrainOptions.from_recipe("tatoeba", output_dir=tmp_path / "run", report_to=["tensorboard"])
        )


def test_report_to_tensorboard_writes_live_curves(trained_run) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = trained_run.output_dir.rglob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    losses = accumulator.Scalars("train/loss")
    assert [event.step for event in losses] == [20, 40, 60]


def test_a_failed_push_keeps_the_run_and_says_how_to_retry(trained_run, fake_hub, caplog) -> None:
    from vaswani_transformer.training import TrainOptions
    from vaswani_transformer.training.final_model import push_final_model

    fake_hub.refuse_commits = True
    options = TrainOptions.from_recipe("tatoeba", push_to_hub="tester/read-only")
    assert push_final_model(options, trained_run.model_dir) is None
    (message,) = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert "pushing to tester/read-only failed" in message and "403" in message
    assert f"vaswani-push {trained_run.model_dir} --repo_id tester/read-only" in message
    assert (trained_run.model_dir / "model.safetensors").is_file()


def test_a_failed_local_dir_write_leaves_no_partial_folder(trained_run, tmp_path: Path, monkeypatch) -> None:
    """The Hub files are written to a temporary folder and renamed once complete: a full disk halfway leaves
    neither a partial --local_dir nor the temporary folder."""
    from vaswani_transformer import hub

    copy = hub.shutil.copyfile

    def full_disk(source, destination, *args, **kwargs):
        if Path(destination).name == "model.safetensors":
            raise OSError(28, "No space left on device")
        return copy(source, destination, *args, **kwargs)

    monkeypatch.setattr(hub.shutil, "copyfile", full_disk)
    with pytest.raises(
        OSError, match=f"no space left on device while writing {tmp_path / 'hub'} .*--local_dir"
    ):
        write_hub_folder(trained_run.model_dir, tmp_path / "hub", "tester/x")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "hub").mkdir()  # an empty folder is taken and filled
    assert {path.name for path in write_hub_folder(trained_run.model_dir, tmp_path / "hub", "tester/x")} >= {
        "model.safetensors", "README.md", "pipeline_vaswani_transformer.py",
    }  # fmt: skip
    assert [path.name for path in tmp_path.iterdir()] == ["hub"]


def test_card_of_a_stock_trainer_fine_tune_claims_only_what_its_folder_records(
    trained_run, tmp_path: Path
) -> None:
    """A model fine-tuned with the stock Trainer once got a card claiming the paper's Adam and
    schedule; now it says its training is not recorded and names the base model the Trainer's card records."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, tokenizer = load_for_decoding(trained_run.model_dir, device="cpu")
    folder = tmp_path / "fine-tuned"
    arguments = Seq2SeqTrainingArguments(output_dir=str(folder), report_to=[], use_cpu=True)
    trainer = Seq2SeqTrainer(model=model, args=arguments, processing_class=tokenizer)
    trainer.save_model()
    trainer.create_model_card(model_name="fine-tuned", finetuned_from="tester/tatoeba-mini")
    card = str(build_model_card(folder, "tester/fine-tuned"))
    metadata = card_metadata(card)
    assert metadata["base_model"] == "tester/tatoeba-mini"
    assert "not recorded in its folder" in card
    assert "Adam(0.9, 0.98, 1e-9)" not in card and "label smoothing 0.1" not in card


def test_push_flags_make_a_trainer_fine_tune_a_first_class_folder(
    trained_run, tmp_path: Path, capsys
) -> None:
    """A Seq2SeqTrainer folder records no pair, data, licence or score: vaswani-push is told them, the card states
    them, and the published folder records its pair, so it serves and splits sentences without flags."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, tokenizer = load_for_decoding(trained_run.model_dir, device="cpu")
    folder = tmp_path / "fine-tuned"
    arguments = Seq2SeqTrainingArguments(output_dir=str(folder), report_to=[], use_cpu=True)
    Seq2SeqTrainer(model=model, args=arguments, processing_class=tokenizer).save_model()
    scores = tmp_path / "evaluation" / "scores.json"
    scores.parent.mkdir()
    scores.write_text((trained_run.model_dir / "scores.json").read_text())
    flags = ["--source_lang", "en", "--target_lang", "de", "--dataset", "Helsinki-NLP/tatoeba"]
    flags += ["--license", "cc-by-2.0", "--scores", str(scores)]
    local = tmp_path / "hub"
    assert push.main([str(folder), "--repo_id", "tester/fine-tuned", "--local_dir", str(local), *flags]) == 0
    card = (local / "README.md").read_text(encoding="utf-8")
    metadata = card_metadata(card)
    assert metadata["language"] == ["en", "de"] and metadata["license"] == "cc-by-2.0"
    assert metadata["datasets"] == ["Helsinki-NLP/tatoeba"]
    recorded = json.loads(scores.read_text())["sacrebleu"]["score"]
    assert metadata["model-index"][0]["results"][0]["metrics"][0]["value"] == round(recorded, 2)
    assert "English→German" in card
    assert recorded_languages(local) == ("en", "de")
    assert json.loads((local / "scores.json").read_text()) == json.loads(scores.read_text())
    verify_model_folder(local)  # the pair in config.json changes nothing the weights compute
    with pytest.raises(SystemExit):
        push.main(
            [str(folder), "--repo_id", "tester/x", "--local_dir", str(tmp_path / "x"), "--source_lang", "en"]
        )
    assert "give --source_lang and --target_lang together" in capsys.readouterr().err
    told_otherwise = ["--source_lang", "fr", "--target_lang", "en", "--local_dir", str(tmp_path / "y")]
    assert push.main([str(trained_run.model_dir), "--repo_id", "tester/x", *told_otherwise]) == 2
    assert "records the pair en→de" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_save_pretrained_with_push_to_hub_uploads_the_pipeline_too(
    tiny_model, tmp_path: Path, fake_hub
) -> None:
    """`save_pretrained(..., push_to_hub=True)` uploads the whole folder code, pipeline and handler included, and
    config.json declares the pipeline."""
    tiny_model.save_pretrained(tmp_path / "x", push_to_hub=True, repo_id="tester/x")
    (path, _, files) = fake_hub.commits()[-1]
    assert "tester/x" in path
    assert set(FOLDER_CODE) <= set(files)
    assert "vaswani-translation" in json.loads(files["config.json"])["custom_pipelines"]
