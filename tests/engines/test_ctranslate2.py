"""CTranslate2 export: the exported model scores and translates as ours does."""

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import SENTENCES, save_random_model, tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.cli import export as export_cli
from vaswani_transformer.decoding.engine import Engine
from vaswani_transformer.decoding.translate import translate
from vaswani_transformer.engines.ctranslate2_engine import CTranslate2Engine, CTranslate2Translator
from vaswani_transformer.engines.ctranslate2_export import DECODING_FILE, check_exportable, to_ctranslate2
from vaswani_transformer.evaluation import load_for_decoding


@pytest.fixture(scope="module")
def random_model_dirs(trained_run, tmp_path_factory) -> dict[str, Path]:
    """Random weights on the miniature's architecture (conftest.save_random_model), also with learned positions
    (Table 3, row E), where the encoder and the decoder have tables of their own."""
    return {
        which: save_random_model(trained_run.model_dir, tmp_path_factory.mktemp("random"), **overrides)
        for which, overrides in (
            ("random", {}),
            ("learned positions", {"position_embedding_type": "learned"}),
        )
    }


def forced_log_probs(model, tokenizer, source: str, target_ids: list[int]) -> torch.Tensor:
    """Our model's log-probability of each token of `target_ids` (ending in </s>) given `source`."""
    inputs = tokenizer([source], return_tensors="pt")
    labels = torch.tensor([target_ids])
    with torch.no_grad():
        logits = model(**inputs, labels=labels).logits
    return logits.log_softmax(-1)[0].gather(-1, labels[0].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize(
    "which", [pytest.param("trained", marks=pytest.mark.slow), "random", "learned positions"]
)
def test_exported_model_gives_our_token_log_probabilities_and_greedy_translations(
    which, trained_run, random_model_dirs, tmp_path
) -> None:
    model_dir = trained_run.model_dir if which == "trained" else random_model_dirs[which]
    model, tokenizer = load_for_decoding(model_dir, device="cpu")
    exported = CTranslate2Translator(to_ctranslate2(model_dir, tmp_path / "ct2"))
    # Teacher-forced scores of a real reference: every token's log-probability, not only the argmax.
    target_ids = tokenizer(text_target="Ich liebe dich.")["input_ids"]
    source_tokens = tokenizer.convert_ids_to_tokens(tokenizer("I love you.")["input_ids"])
    target_tokens = tokenizer.convert_ids_to_tokens(target_ids[:-1])  # CTranslate2 appends </s> itself
    (scored,) = exported.translator.score_batch([source_tokens], [target_tokens])
    ours = forced_log_probs(model, tokenizer, "I love you.", target_ids)
    torch.testing.assert_close(torch.tensor(scored.log_probs), ours, atol=1e-4, rtol=1e-4)
    # Greedy decoding: the same tokens, batched (padding) and one by one; both in float32.
    fp32 = {"num_beams": 1, "dtype": torch.float32}
    greedy = translate(SENTENCES, model, tokenizer, **fp32)
    assert exported.translate(SENTENCES, beam_size=1) == greedy
    one_by_one = translate(SENTENCES, model, tokenizer, batch_size=1, **fp32)  # each its own length limit
    assert exported.translate(SENTENCES, beam_size=1, batch_size=1) == one_by_one
    assert exported.translate(SENTENCES, beam_size=1, batch_size=2) == translate(
        SENTENCES, model, tokenizer, batch_size=2, **fp32
    )
    if which == "random":
        assert len(set(greedy)) == len(SENTENCES)  # the comparison is not between empty strings
    if which == "learned positions":  # the export must not give the decoder the encoder's table
        encoder, decoder = model.get_encoder().embed_positions, model.get_decoder().embed_positions
        assert not torch.equal(encoder.weight, decoder.weight)


# The Python engines take translate()'s decoding names (num_beams=1 was a raw pybind TypeError here).
# Beam search agrees where no hypothesis ends early (random weights run to the limit): |Y|^α and GNMT's
# ((5 + |Y|) / 6)^α then rank the beams alike.
DECODING_SETTINGS = [
    {"num_beams": 1},
    {"num_beams": 1, "max_new_tokens": 3},
    {"num_beams": 3, "length_penalty": 0.0, "max_new_tokens": 4},
    {"num_beams": 4, "length_penalty": 1.0},
]


@pytest.fixture(scope="module")
def random_ct2_dir(random_model_dirs, tmp_path_factory) -> Path:
    """The random model converted once, for every decoding setting below."""
    return to_ctranslate2(random_model_dirs["random"], tmp_path_factory.mktemp("random-ct2") / "ct2")


@pytest.mark.parametrize("settings", DECODING_SETTINGS, ids=str)
def test_translator_and_engine_take_translates_decoding_names(
    settings, random_model_dirs, random_ct2_dir
) -> None:
    model, tokenizer = load_for_decoding(random_model_dirs["random"], device="cpu", dtype=torch.float32)
    expected = translate(SENTENCES, model, tokenizer, dtype=torch.float32, **settings)
    translator = CTranslate2Translator(random_ct2_dir)
    assert translator.translate(SENTENCES, **settings) == expected
    engine = CTranslate2Engine(translator)
    assert isinstance(engine, Engine) and engine.name == "ctranslate2"
    assert engine.translate(SENTENCES, **settings) == expected
    if "max_new_tokens" in settings:  # the limit cut the translations: the setting was used, not dropped
        assert expected != translate(SENTENCES, model, tokenizer, dtype=torch.float32, num_beams=1)


def test_export_writes_the_models_decoding_and_refuses_to_overwrite(trained_run, tmp_path) -> None:
    folder = to_ctranslate2(trained_run.model_dir, tmp_path / "ct2", quantization="int8")
    model, _ = load_for_decoding(trained_run.model_dir, device="cpu")
    decoding = json.loads((folder / DECODING_FILE).read_text())
    assert decoding == {
        "beam_size": model.generation_config.num_beams,
        "length_penalty": model.generation_config.length_penalty,
        "max_length_offset": model.config.max_length_offset,
        "max_positions": 1024,  # the export's position rows, which bound the sources it translates whole
        "min_decoding_length": 0,
    }
    assert len(CTranslate2Translator(folder).translate(SENTENCES[:2])) == 2  # int8 weights load and decode
    with pytest.raises(FileExistsError, match="--overwrite"):
        to_ctranslate2(trained_run.model_dir, folder)
    with pytest.raises(ValueError, match="quantization"):
        to_ctranslate2(trained_run.model_dir, tmp_path / "other", quantization="int3")


def test_a_configuration_ctranslate2_cannot_express_is_refused_before_converting() -> None:
    model = VaswaniTransformerForConditionalGeneration(tiny_config(d_k=16, d_v=8))
    with pytest.raises(ValueError, match="d_k = d_v"):
        check_exportable(model)


def test_export_command(trained_run, tmp_path, capsys) -> None:
    output = tmp_path / "served"
    assert export_cli.main([str(trained_run.model_dir), str(output)]) == 0
    assert capsys.readouterr().out.strip() == str(output)
    assert (output / "model.bin").exists() and (output / "tokenizer.json").exists()
    assert export_cli.main([str(trained_run.model_dir), str(output)]) == 2  # not empty, no --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert export_cli.main([str(trained_run.model_dir), str(output), "--overwrite"]) == 0


def test_a_source_beyond_the_exports_positions_is_cut_with_a_warning_not_an_error(
    random_model_dirs, tmp_path, caplog
) -> None:
    """CTranslate2 failed ("No position encodings ...") on a source whose output limit (source + 50) passed the
    export's position rows: the engine says how long a source it translates whole, and cuts longer ones to it, as
    the PyTorch engine cuts at its position table."""
    folder = to_ctranslate2(random_model_dirs["random"], tmp_path / "ct2", max_positions=64)
    translator = CTranslate2Translator(folder)
    assert translator.max_source_tokens == 64 - 50 - 1
    assert CTranslate2Engine(translator).max_source_tokens == translator.max_source_tokens
    long_source = " ".join(["house"] * 40)
    (translation,) = translator.translate([long_source], beam_size=1)
    assert isinstance(translation, str)
    assert any("longer than 13 tokens were cut to 13" in message for message in caplog.messages)
