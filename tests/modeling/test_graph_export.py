"""Graph export at any shape: torch.export and ONNX (dynamo) of the whole model, run at shapes other than the
example's (the batch size is no longer fixed to the example's: `Guard failed: attention_mask.size()[0] == 2`
was the error)."""

import onnxruntime
import pytest
import torch
from torch.export import Dim

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration

pytestmark = pytest.mark.slow  # torch.export and ONNX export of the whole model: seconds each


class Logits(torch.nn.Module):
    """The model's teacher-forced logits from three tensors (what an exported graph takes)."""

    def __init__(self, model: VaswaniTransformerForConditionalGeneration) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> torch.Tensor:
        inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
        }
        return self.model(**inputs, use_cache=False).logits


def batch(sentences: int, source_length: int, target_length: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random source ids with the first sentence padded, a padding mask, and decoder inputs."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, 64, (sentences, source_length), generator=generator)
    input_ids[0, source_length // 2 :] = 0
    decoder_input_ids = torch.randint(4, 64, (sentences, target_length), generator=generator)
    return input_ids, (input_ids != 0).long(), decoder_input_ids


DYNAMIC = {
    "input_ids": {0: Dim("batch"), 1: Dim("source")},
    "attention_mask": {0: Dim("batch"), 1: Dim("source")},
    "decoder_input_ids": {0: Dim("batch"), 1: Dim("target")},
}


@pytest.fixture(scope="module")
def logits_module() -> Logits:
    torch.manual_seed(0)
    return Logits(VaswaniTransformerForConditionalGeneration(tiny_config()).eval())


def test_torch_export_follows_batch_and_lengths(logits_module: Logits) -> None:
    exported = torch.export.export(
        logits_module, batch(2, 6, 3, seed=0), dynamic_shapes=DYNAMIC, strict=False
    )
    for shape in ((5, 9, 4), (1, 3, 7), (3, 6, 3)):
        inputs = batch(*shape, seed=sum(shape))
        with torch.no_grad():
            torch.testing.assert_close(
                exported.module()(*inputs), logits_module(*inputs), rtol=1e-5, atol=1e-5
            )


def test_onnx_export_runs_in_onnx_runtime_at_other_shapes(logits_module: Logits, tmp_path) -> None:
    program = torch.onnx.export(logits_module, batch(2, 6, 3, seed=0), dynamo=True, dynamic_shapes=DYNAMIC)
    program.save(tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(tmp_path / "model.onnx", providers=["CPUExecutionProvider"])
    for shape in ((5, 9, 4), (1, 3, 7)):
        inputs = batch(*shape, seed=sum(shape))
        feeds = dict(
            zip(
                ("input_ids", "attention_mask", "decoder_input_ids"), (t.numpy() for t in inputs), strict=True
            )
        )
        (logits,) = session.run(None, feeds)
        with torch.no_grad():
            torch.testing.assert_close(torch.from_numpy(logits), logits_module(*inputs), rtol=1e-4, atol=1e-5)
