"""`vaswani-convert fairseq CHECKPOINT_DIR OUT`: a fairseq checkpoint folder becomes a model folder of this
package that computes what the FSMT model it was made from computes, and tokenises as it does."""

from pathlib import Path

import torch
import yaml
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import vaswani_transformer
from tests.convert.fairseq_fixture import HOLDABLE_SIZES, SENTENCES, make_fairseq_checkpoint
from vaswani_transformer.hub import build_model_card

vaswani_transformer.register_auto_classes()  # the Auto classes load the converted folder with the package's classes


def test_vaswani_convert_fairseq_gives_the_fsmt_models_outputs(tmp_path: Path) -> None:
    from vaswani_transformer.cli import convert  # the command comes with the fairseq half of the conversion

    made = make_fairseq_checkpoint(tmp_path, sizes=HOLDABLE_SIZES)
    out = tmp_path / "converted"
    assert convert.main(["fairseq", str(made.folder), str(out)]) == 0

    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer(SENTENCES).input_ids == made.tokenizer(SENTENCES).input_ids
    inputs = made.tokenizer(SENTENCES, return_tensors="pt", padding=True)
    # Teacher forcing's decoder inputs, </s> then the first tokens (no padding inside: fairseq gives padding its
    # own position, this model the next one; only real tokens' outputs count, in training and decoding alike)
    start = torch.full((len(SENTENCES), 1), made.model.config.decoder_start_token_id)
    decoder_input_ids = torch.cat([start, inputs.input_ids[:, :5]], dim=1)
    with torch.no_grad():
        # use_cache=False: with its cache on, FSMT's forward drops the causal mask (it expects one new token)
        expected = made.model(**inputs, decoder_input_ids=decoder_input_ids, use_cache=False).logits
        logits = model(**inputs, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
    greedy = {"num_beams": 1, "do_sample": False, "max_new_tokens": 10}
    assert torch.equal(model.generate(**inputs, **greedy), made.model.generate(**inputs, **greedy))
    # The folder records its origin for the card: fairseq's licence, which covers its released
    # models, and the citation fairseq asks for, beside Vaswani's
    card = str(build_model_card(out, "you/wmt16-en-de"))
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["license"] == "mit" and metadata["language"] == made.model.config.langs
    assert "@inproceedings{ott2019fairseq," in card and "@inproceedings{vaswani2017attention," in card
    assert f"Converted by `vaswani-convert fairseq` from `{made.folder.name}`" in card


def test_a_checkpoint_whose_stacks_differ_in_width_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    """fairseq lets the encoder and decoder differ in d_ff and heads; this package's model has one of each: the
    refusal names the checkpoint folder given (not the temporary FSMT folder) and writes nothing."""
    from vaswani_transformer.cli import convert

    made = make_fairseq_checkpoint(tmp_path)  # SIZES: heads 4 / 2, d_ff 32 / 24
    out = tmp_path / "converted"
    assert convert.main(["fairseq", str(made.folder), str(out)]) == 2
    error = capsys.readouterr().err
    assert (
        f"{made.folder} has encoder_ffn_dim=32 but decoder_ffn_dim=24" in error and "cannot hold it" in error
    )
    assert not out.exists()
