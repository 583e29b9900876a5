"""Dynamic int8 linear layers for PyTorch decoding on a CPU, through torchao (`pip install torchao`).

`quantize_int8` gives the encoder's and decoder's Linear layers (attention projections, feed-forward) int8
weights, one scale per output channel, and quantizes their inputs per token at run time (int8 × int8 products,
rescaled to floating point). Embeddings and `lm_head` keep their floating-point table: `lm_head.weight` *is*
the embedding table (§3.4, tied), and quantizing it would give `lm_head` a separate int8 copy while the
embedding keeps the float one; the vocabulary projection also turns its rounding errors straight into the
beam scores. torchao is PyTorch's maintained quantization library (`torch.ao.quantization.quantize_dynamic` is
deprecated and points to it).
"""

from typing import Any

from torch import nn

from ..extras import install_command
from ..quiet import quiet_import_warnings

INT8_EXTRA = install_command("int8")
INT8_DESCRIPTION = (
    "int8 (torchao: per-channel int8 weights, per-token dynamic int8 activations) in the encoder's and "
    "decoder's linear layers; embeddings and the tied lm_head unquantized"
)


def _torchao_quantization() -> Any:
    """torchao.quantization, or an error saying how to install it."""
    try:
        with quiet_import_warnings():
            from torchao import quantization
    except ImportError as error:
        raise ImportError(f"int8 decoding with PyTorch needs torchao: {INT8_EXTRA}.") from error
    return quantization


def _quantizable(module: nn.Module, name: str) -> bool:
    """A Linear layer of the encoder or decoder: not `lm_head`, whose weight is the shared embedding table."""
    return isinstance(module, nn.Linear) and name != "lm_head"


def quantize_int8(model: nn.Module) -> nn.Module:
    """Give `model`'s encoder and decoder Linear layers dynamic int8 (in place, for inference); returns it."""
    quantization = _torchao_quantization()
    # set_inductor_config=False: decoding runs eagerly, and torchao would otherwise change torch's global
    # inductor settings.
    config = quantization.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False)
    quantization.quantize_(model, config, filter_fn=_quantizable)
    return model


def int8_linear_layers(model: nn.Module) -> list[str]:
    """Names of `model`'s Linear layers whose weights are torchao int8 tensors (none without torchao)."""
    try:
        quantization = _torchao_quantization()
    except ImportError:
        return []
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and isinstance(module.weight, quantization.Int8Tensor)
    ]
