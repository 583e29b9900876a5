"""`vaswani-convert fsmt`: a small random FSMT model, converted and reloaded with the Auto classes, gives
FSMT's logits, greedy and beam outputs and token ids, and everything this package does works on the folder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    FSMTForConditionalGeneration,
    FSMTTokenizer,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from tests.conftest import WITHOUT_THE_PACKAGE
from vaswani_transformer import VaswaniTransformerForConditionalGeneration, translate
from vaswani_transformer.cli import convert as convert_cli
from vaswani_transformer.cli import evaluate as evaluate_cli
from vaswani_transformer.cli import export as export_cli
from vaswani_transformer.cli import export_onnx as export_onnx_cli
from vaswani_transformer.cli import push as push_cli
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.engines import CTranslate2Translator, load_onnx_model
from vaswani_transformer.hub import build_model_card

# punctuation, numbers, compounds (Moses splits them with @-@) and characters outside the vocabulary
SENTENCES = [
    "The 3 dogs, 12 cats and the bird sat on 1 mat.",
    "A well-known rock-band plays at 10:30!",
    'Is "x" the café\'s € sign?',
    "Ring.",
]
NEW_TOKENS = 16  # enough to compare searches step for step; a random model rarely ends a sentence itself


@pytest.fixture(scope="module")
def converted(fsmt_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("converted") / "model"
    assert convert_cli.main(["fsmt", str(fsmt_folder), str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def fsmt(fsmt_folder: Path) -> FSMTForConditionalGeneration:
    return FSMTForConditionalGeneration.from_pretrained(fsmt_folder).eval()


@pytest.fixture(scope="module")
def ours(converted: Path) -> VaswaniTransformerForConditionalGeneration:
    return AutoModelForSeq2SeqLM.from_pretrained(converted).eval()


@pytest.fixture(scope="module")
def tokenizer(fsmt_folder: Path) -> FSMTTokenizer:
    return FSMTTokenizer.from_pretrained(fsmt_folder)


def test_the_folder_holds_the_options_fairseq_needs(
    converted: Path, fsmt: FSMTForConditionalGeneration
) -> None:
    config = json.loads((converted / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "vaswani_transformer"
    assert (config["sinusoid_layout"], config["position_offset"], config["attention_bias"]) == (
        "halves",
        2,
        True,
    )
    ids = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
    assert [config[name] for name in ids] == [1, 0, 2, 2]
    assert config["layer_norm_eps"] == 1e-5 and config["length_penalty_type"] == "hf"
    generation = json.loads((converted / "generation_config.json").read_text(encoding="utf-8"))
    assert generation["num_beams"] == fsmt.generation_config.num_beams == 5
    assert generation["max_length"] == 200 and generation["forced_eos_token_id"] == 2
    assert (converted / "modeling_vaswani_transformer.py").is_file() and "auto_map" in config


def test_positions_are_fsmt_s_table_from_its_offset(ours, fsmt) -> None:
    length = 40
    table = fsmt.model.encoder.embed_positions.get_embedding(length + 2, fsmt.config.d_model, 1)[2:]
    for stack in (ours.get_encoder(), ours.get_decoder()):
        assert torch.equal(stack.embed_positions(torch.arange(length)), table)


def test_logits_match_fsmt_on_a_padded_batch(ours, fsmt, tokenizer) -> None:
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()
    generator = torch.Generator().manual_seed(0)
    decoder_input_ids = torch.randint(4, ours.config.vocab_size, (len(SENTENCES), 7), generator=generator)
    decoder_input_ids[:, 0] = ours.config.decoder_start_token_id
    with torch.no_grad():
        expected = fsmt(**batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits
        logits = ours(**batch, decoder_input_ids=decoder_input_ids).logits
    assert expected.abs().max() > 1  # logits of a model that decides, not near-uniform ones
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_gives_fsmt_s_outputs(ours, fsmt, tokenizer, num_beams: int) -> None:
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    settings = {"num_beams": num_beams, "max_new_tokens": NEW_TOKENS}
    with torch.no_grad():
        expected = fsmt.generate(**batch, **settings)
        outputs = ours.generate(**batch, **settings)
    assert torch.equal(outputs, expected)
    translations = translate(SENTENCES, ours, tokenizer, dtype=torch.float32, **settings)
    assert translations == [
        text.strip() for text in tokenizer.batch_decode(expected, skip_special_tokens=True)
    ]


def test_the_tokenizer_is_fsmt_s_with_its_ids(converted: Path, tokenizer: FSMTTokenizer) -> None:
    loaded = AutoTokenizer.from_pretrained(converted)
    assert type(loaded) is FSMTTokenizer
    ids = loaded(SENTENCES)["input_ids"]
    assert ids == tokenizer(SENTENCES)["input_ids"]
    at = tokenizer.convert_tokens_to_ids("@-@</w>")
    assert at in ids[1] and tokenizer.unk_token_id in ids[2] and all(row[-1] == 2 for row in ids)
    assert loaded.batch_decode(ids, skip_special_tokens=True) == tokenizer.batch_decode(
        ids, skip_special_tokens=True
    )


WITHOUT_PACKAGE = (
    WITHOUT_THE_PACKAGE
    + r"""
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

folder, sentences, new_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
batch = tokenizer(sentences, padding=True, return_tensors="pt")
with torch.no_grad():
    outputs = model.generate(**batch, num_beams=4, max_new_tokens=new_tokens)
translator = pipeline("vaswani-translation", model=folder, trust_remote_code=True)
pipelined = translator(sentences, max_new_tokens=new_tokens, decoding_dtype=torch.float32)
print(json.dumps({
    "outputs": outputs.tolist(),
    "model_class": type(model).__module__,
    "pipeline": [result["translation_text"] for result in pipelined],
}))
"""
)


@pytest.mark.slow  # a fresh interpreter that imports the package
def test_the_folder_loads_without_the_package(converted: Path, fsmt, tokenizer) -> None:
    arguments = [str(converted), json.dumps(SENTENCES), str(NEW_TOKENS)]
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGE, *arguments], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = fsmt.generate(**batch, num_beams=4, max_new_tokens=NEW_TOKENS)
    assert result["outputs"] == expected.tolist()
    assert result["model_class"].startswith("transformers_modules.")  # the folder's own code
    singles = [
        fsmt.generate(**tokenizer([s], return_tensors="pt"), max_new_tokens=NEW_TOKENS) for s in SENTENCES
    ]
    assert result["pipeline"] == [
        tokenizer.decode(output[0], skip_special_tokens=True).strip() for output in singles
    ]


def test_ctranslate2_export_gives_our_greedy_tokens(converted: Path, ours, tokenizer, tmp_path: Path) -> None:
    assert export_cli.main([str(converted), str(tmp_path / "ct2")]) == 0
    translator = CTranslate2Translator(tmp_path / "ct2")
    assert translator.decoding["max_decoding_length"] == 199  # FSMT's max_length 200, less the start token
    assert (translator.decoding["beam_size"], translator.decoding["length_penalty"]) == (5, 1.0)
    assert len(translator.translate(SENTENCES)) == len(SENTENCES)  # with the decoding defaults as written
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(SENTENCES)["input_ids"]]
    results = translator.translator.translate_batch(
        sources, beam_size=1, max_decoding_length=NEW_TOKENS, min_decoding_length=0
    )
    for sentence, result in zip(SENTENCES, results, strict=True):
        with (
            torch.no_grad()
        ):  # forced_eos_token_id: fairseq's end of sentence at the limit, which CTranslate2 lacks
            output = ours.generate(
                **tokenizer([sentence], return_tensors="pt"),
                num_beams=1,
                max_new_tokens=NEW_TOKENS,
                forced_eos_token_id=None,
            )[0, 1:].tolist()
        expected = tokenizer.convert_ids_to_tokens([token for token in output if token not in (1, 2)])
        assert result.hypotheses[0] == expected


@pytest.mark.slow  # exports a model to ONNX (dynamo): seconds
def test_onnx_export_gives_our_tokens(converted: Path, ours, tokenizer, tmp_path: Path) -> None:
    assert export_onnx_cli.main([str(converted), str(tmp_path / "onnx")]) == 0
    exported, _ = load_onnx_model(tmp_path / "onnx")
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    for num_beams in (1, 4):
        with torch.no_grad():
            expected = ours.generate(**batch, num_beams=num_beams, max_new_tokens=NEW_TOKENS)
            assert torch.equal(
                exported.generate(**batch, num_beams=num_beams, max_new_tokens=NEW_TOKENS), expected
            )


@pytest.mark.slow  # exports it to ONNX (dynamo) and CTranslate2 through the engines' caches
def test_translate_and_evaluate_commands_work_on_it(
    converted: Path, fsmt, tokenizer, tmp_path: Path, capsys
) -> None:
    source, references = tmp_path / "source.en", tmp_path / "references.de"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    references.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    # float32: on a CPU that measures bfloat16 faster, autocast could tip a random model's close calls
    assert translate_cli.main([str(converted), str(source), "--num_beams", "1", "--dtype", "float32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    with torch.no_grad():
        singles = [fsmt.generate(**tokenizer([s], return_tensors="pt"), num_beams=1) for s in SENTENCES]
    assert lines == [tokenizer.decode(output[0], skip_special_tokens=True).strip() for output in singles]
    # the engines, through their caches of the converted folder: ONNX Runtime runs the same search
    engines = {"onnxruntime": "--onnx_cache", "ctranslate2": "--ctranslate2_cache"}
    for engine, cache in engines.items():
        flags = ["--engine", engine, cache, str(tmp_path / engine), "--num_beams", "1"]
        assert translate_cli.main([str(converted), str(source), *flags]) == 0
        translated = capsys.readouterr().out.splitlines()
        assert translated == lines if engine == "onnxruntime" else len(translated) == len(lines)
    arguments = [
        "--source",
        str(source),
        "--references",
        str(references),
        "--num_beams",
        "1",
        "--split_compounds",
    ]
    assert evaluate_cli.main([str(converted), *arguments, "--name", "test"]) == 0
    evaluation = converted.parent / f"{converted.name}-evaluation"
    scores = json.loads((evaluation / "test_scores.json").read_text(encoding="utf-8"))
    assert 0 <= scores["tokenized_bleu"]["score"] <= 100 and (evaluation / "test_hypotheses.txt").is_file()


def test_the_stock_seq2seq_trainer_fine_tunes_it(converted: Path, tmp_path: Path) -> None:
    model = AutoModelForSeq2SeqLM.from_pretrained(converted)
    tokenizer = AutoTokenizer.from_pretrained(converted)
    rows = [dict(tokenizer(text, text_target=text)) for text in SENTENCES * 2]
    before = model.lm_head.weight.detach().clone()
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=arguments,
        train_dataset=rows,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(model.lm_head.weight, before)
    trainer.save_model(str(tmp_path / "tuned"))
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "tuned")
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight.detach().cpu())
    assert (
        reloaded.config.position_offset == 2
        and type(AutoTokenizer.from_pretrained(tmp_path / "tuned")) is FSMTTokenizer
    )


@pytest.mark.slow  # the card translates an example: a random model decodes to its length limit
def test_the_model_card_describes_the_converted_model(converted: Path) -> None:
    card = str(build_model_card(converted, "you/wmt19-en-de"))
    assert "fairseq's sinusoidal positions (sines before cosines, counted from 2)" in card
    assert '`FSMTTokenizer.from_pretrained("you/wmt19-en-de")`' in card
    assert "decodes as its original does: beam 5, length penalty α = 1.0 in the form |Y|^α" in card


ORIGINAL_CITATION = """@inproceedings{ng2019facebook,
  title={Facebook FAIR's WMT19 News Translation Task Submission},
  author={Ng, Nathan and Yee, Kyra and Baevski, Alexei and Ott, Myle and Auli, Michael and Edunov, Sergey},
  booktitle={Proc. of WMT},
  year={2019},
}"""
# The original's card as the Hub holds it (its licence in the old spelling, transformers' FSMT cards' first form)
ORIGINAL_CARD = (
    f"---\nlanguage:\n- en\n- de\nlicense: Apache 2.0\n---\n# FSMT\n\n```bibtex\n{ORIGINAL_CITATION}\n```\n"
)


def test_a_converted_hub_model_s_card_keeps_its_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card of a model converted from the Hub names it as base_model, with its language pair, its
    licence (not this package's), its citation beside Vaswani's and "converted from" as its training; its Usage and
    Limitations state the same decoding (its generation_config's |Y|^α and output limit); it says sacremoses."""
    from huggingface_hub import constants

    from tests.convert.conftest import save_small_fsmt
    from vaswani_transformer.provenance import ORIGIN_FILE

    repo = tmp_path / "hub-cache" / "models--facebook--wmt19-en-de"
    snapshot = save_small_fsmt(repo / "snapshots" / ("0" * 40))
    (snapshot / "README.md").write_text(ORIGINAL_CARD, encoding="utf-8")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40, encoding="utf-8")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    assert convert_cli.main(["fsmt", "facebook/wmt19-en-de", str(tmp_path / "converted")]) == 0
    hub_folder = tmp_path / "hub"
    assert (
        push_cli.main(
            [str(tmp_path / "converted"), "--repo_id", "you/wmt19-en-de", "--local_dir", str(hub_folder)]
        )
        == 0
    )
    card = (hub_folder / "README.md").read_text(encoding="utf-8")
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["base_model"] == "facebook/wmt19-en-de" and metadata["language"] == ["en", "de"]
    assert metadata["license"] == "apache-2.0"  # the original's, as its card states it
    assert "@inproceedings{vaswani2017attention," in card and ORIGINAL_CITATION in card
    assert "Converted by `vaswani-convert fsmt` from [facebook/wmt19-en-de]" in card
    assert "Not recorded" not in card and "not recorded" not in card
    assert "beam 5, length penalty α = 1.0 in the form |Y|^α, output limit: 200 tokens" in card  # Usage
    assert "length penalty |Y|^α (α = 1.0) and an output limit of 200 tokens" in card  # Limitations
    assert "(5 + |Y|) / 6" not in card and "+ 50" not in card
    assert "`pip install torch transformers sacremoses`" in card
    assert "Translates English into German only" in card
    assert (
        hub_folder / ORIGIN_FILE
    ).is_file()  # published with the model: a push of its push keeps the origin


def test_a_local_fsmt_folder_without_a_card_claims_no_licence(converted: Path) -> None:
    """A folder's original states no licence and no Hub id: the card asserts neither, nor this package's licence."""
    card = str(build_model_card(converted, "you/wmt19-en-de"))
    metadata = yaml.safe_load(card.split("---")[1])
    assert "license" not in metadata and "base_model" not in metadata
    assert metadata["language"] == ["en", "de"]
    assert "Converted by `vaswani-convert fsmt` from `model`" in card  # the FSMT folder's name
