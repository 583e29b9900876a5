"""`vaswani-convert fairseq CHECKPOINT_DIR OUT` (issue 52): a fairseq checkpoint folder becomes a model folder of this
package that computes what the FSMT model it was made from computes, and tokenises as it does."""

from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import vaswani_transformer  # noqa: F401  (registers the model with transformers' Auto classes)
from tests.convert.fairseq_fixture import SENTENCES, make_fairseq_checkpoint


def test_vaswani_convert_fairseq_gives_the_fsmt_models_outputs(tmp_path: Path) -> None:
    from vaswani_transformer.cli import convert  # the command comes with the other half of issue 52

    made = make_fairseq_checkpoint(tmp_path)
    out = tmp_path / "converted"
    assert convert.main(["fairseq", str(made.folder), str(out)]) == 0

    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer(SENTENCES).input_ids == made.tokenizer(SENTENCES).input_ids
    inputs = made.tokenizer(SENTENCES, return_tensors="pt", padding=True)
    decoder_input_ids = inputs.input_ids[:, :6].roll(1, dims=1)
    with torch.no_grad():
        expected = made.model(**inputs, decoder_input_ids=decoder_input_ids).logits
        logits = model(**inputs, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
    greedy = {"num_beams": 1, "do_sample": False, "max_new_tokens": 10}
    assert torch.equal(model.generate(**inputs, **greedy), made.model.generate(**inputs, **greedy))
