"""Configuration of the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

The defaults *are* the paper's base model (Table 3, row "base"); `from_preset` gives the other rows. The root of
the remote-code tier (docs/architecture.md): every file of this folder imports it, and it imports only the presets.
"""

import hashlib
import json
from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .presets_vaswani_transformer import PRESETS

POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")
# "interleaved": the paper's sin, cos, sin, cos … (§3.5); "halves": fairseq's and tensor2tensor's sines, then cosines.
SINUSOID_LAYOUTS = ("interleaved", "halves")
LENGTH_PENALTY_TYPES = ("gnmt", "hf")
ACTIVATIONS = ("relu", "gelu")
# "normal": every projection and embedding N(0, init_std), as transformers initialises Marian and BART.
# "xavier": Xavier-uniform projections and N(0, d_model^-0.5) embeddings, as fairseq and tensor2tensor do.
INIT_SCHEMES = ("normal", "xavier")
# The task under which the package registers its translation pipeline (`register_auto_classes`), and under which a saved
# folder declares it as remote code (pipeline_vaswani_transformer.py, saving_vaswani_transformer.py).
PIPELINE_TASK = "vaswani-translation"
# What a config can change without changing any weight's shape, yet which changes what the weights compute: a saved
# config.json records a fingerprint of these under FINGERPRINT_KEY, so that a loader finds one edited after the
# weights were saved (evaluation/verification.py; docs/hub.md, "A folder must match its weights").
SHAPE_FREE_SETTINGS = (
    "num_heads",
    "d_k",
    "d_v",
    "activation_function",
    "scale_embedding",
    "position_embedding_type",
    "sinusoid_layout",
    "position_offset",
    "max_position_embeddings",
    "layer_norm_eps",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)
FINGERPRINT_KEY = "architecture_fingerprint"


@strict
class VaswaniTransformerConfig(PreTrainedConfig):
    r"""Hyper-parameters of the paper's encoder-decoder Transformer.

    Field names follow the paper (§3, §5.4): `d_model`, `d_ff`, `num_heads` (h), `d_k`/`d_v` (None means
    d_model / h), N layers per stack, residual `dropout` (P_drop), `label_smoothing` (ε_ls). One BPE vocabulary
    is shared by source and target and tied to the pre-softmax projection (§3.4).

    Initialisation is not fixed by the paper. `init_scheme="normal"` (the default) draws every projection and
    the shared embedding from N(0, `init_std`), as transformers does for Marian and BART; `"xavier"` is fairseq's
    and tensor2tensor's Xavier-uniform projections with N(0, d_model^-0.5) embeddings. With the paper's post-norm
    layers, "xavier" starts a 6-layer encoder with nearly identical outputs at every position, and base models
    collapse with it at learning rates the paper's schedule reaches on small corpora (docs/decisions/
    initialisation.md).

    Decoding (§6.1): `length_penalty_type="gnmt"` makes `generate(length_penalty=α)` divide beam scores by
    ((5 + |Y|) / 6)^α as in the paper (Wu et al., 2016), instead of transformers' |Y|^α (`"hf"`);
    `max_length_offset` makes the default output limit "input length + 50".

    The shared vocabulary (§3.4) is the tokenizer's: `tokenizer_fingerprint` records the tokenizer a model was
    trained with (a hash of its normalizer, vocabulary and merges), so that a loader can refuse another tokenizer of
    the same size, whose ids would mean other words to these weights.

    Training speed: with `fused_loss` (the default) a training forward with labels of a model given a fused loss
    (the package's training: `vaswani_transformer.training.fused_loss`) computes the label-smoothed loss chunk by
    chunk from the decoder output and the tied softmax weights, never holding the logits, and returns
    `logits=None`; the loss and gradients are those of the logits path (tested). `fast_path` (the default) runs the speed machinery of
    fast_path_vaswani_transformer.py (16-bit dropout draws and eager bfloat16 attention on CPUs, a bfloat16
    residual stream under bfloat16 autocast); False runs the plain reference path (nn.Dropout, a float32 stream,
    the configured attention kernel), against which the tests check it.

    Published weights of this architecture (fairseq's WMT Transformers, transformers' FSMT; `vaswani-convert`)
    differ from the paper in three places, each an option that is off by default: `sinusoid_layout="halves"` puts
    all sines before all cosines with frequencies exp(-i · ln(10000) / (d_model/2 - 1)) (fairseq, tensor2tensor)
    instead of the paper's interleaved 1 / 10000^(2i/d_model); `position_offset` is added to every position (fairseq
    numbers them from padding_idx + 1 = 2); `attention_bias` gives the Q, K, V and output projections biases. Their
    dictionaries also order the special tokens otherwise (`<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, decoding from
    `</s>`), which the token ids below express.
    """

    model_type = "vaswani_transformer"
    keys_to_ignore_at_inference: ClassVar[list[str]] = ["past_key_values"]
    # Generic names for HF tooling. `num_hidden_layers` is the decoder's depth: generation sizes its KV cache by it.
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_decoder_layers",
    }

    vocab_size: int = 37000
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: int | None = None
    d_v: int | None = None
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    activation_function: str = "relu"
    label_smoothing: float | int = 0.1
    fused_loss: bool = True
    fast_path: bool = True
    position_embedding_type: str = "sinusoidal"
    sinusoid_layout: str = "interleaved"
    position_offset: int = 0
    attention_bias: bool = False
    max_position_embeddings: int = 1024
    scale_embedding: bool = True
    layer_norm_eps: float = 1e-6
    init_scheme: str = "normal"
    init_std: float = 0.02
    length_penalty_type: str = "gnmt"
    max_length_offset: int = 50
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | list[int] | None = 3
    decoder_start_token_id: int | None = 2
    is_encoder_decoder: bool = True
    use_cache: bool = True
    tie_word_embeddings: bool = True
    tokenizer_fingerprint: str | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        self._check_sizes()
        self._check_probabilities()
        self._check_choices()
        kwargs.pop(
            FINGERPRINT_KEY, None
        )  # a record of the saved file, recomputed whenever the config is saved
        super().__post_init__(**_without_locally_served_pipelines(kwargs))

    def architecture_fingerprint(self) -> str:
        """The fingerprint of the model type and the `SHAPE_FREE_SETTINGS`, as saved under FINGERPRINT_KEY."""
        settings = {
            "model_type": self.model_type,
            **{name: getattr(self, name) for name in SHAPE_FREE_SETTINGS},
        }
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """transformers' dictionary (what config.json holds), with the architecture fingerprint."""
        return {**super().to_dict(), FINGERPRINT_KEY: self.architecture_fingerprint()}

    @property
    def head_dim_k(self) -> int:
        """d_k: per-head size of queries and keys."""
        return self.d_k if self.d_k is not None else self.d_model // self.num_heads

    @property
    def head_dim_v(self) -> int:
        """d_v: per-head size of values."""
        return self.d_v if self.d_v is not None else self.d_model // self.num_heads

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "VaswaniTransformerConfig":
        """A config for one of the paper's named configurations, e.g. `from_preset("big", vocab_size=37000)`.

        Args:
            name: a key of `PRESETS`: "base" and "big" (Table 3), its rows' variants ("base-h1", ...), or the
                smaller "small" and "tiny".
            **overrides: fields set on top of the preset's.

        Returns:
            The config.

        Raises:
            ValueError: an unknown preset.
        """
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})

    def _check_sizes(self) -> None:
        """Sizes are positive and heads split d_model evenly unless d_k/d_v are given."""
        for name in (
            "vocab_size",
            "d_model",
            "d_ff",
            "num_heads",
            "num_encoder_layers",
            "num_decoder_layers",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value}.")
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(
                    f"{name} must be a positive integer or None (= d_model / num_heads), got {value}."
                )
        if (self.d_k is None or self.d_v is None) and self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}), "
                "or set d_k and d_v explicitly."
            )
        if self.position_embedding_type == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"d_model must be even for sinusoidal positions (sin/cos pairs), got {self.d_model}."
            )
        if self.sinusoid_layout == "halves" and self.d_model < 4:  # its frequencies divide by d_model/2 - 1
            raise ValueError(f"d_model must be at least 4 for sinusoid_layout='halves', got {self.d_model}.")

    def _check_probabilities(self) -> None:
        """Dropout rates and label smoothing lie in [0, 1)."""
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}.")

    def _check_choices(self) -> None:
        """Categorical fields take one of their documented values."""
        choices = {
            "position_embedding_type": POSITION_EMBEDDING_TYPES,
            "sinusoid_layout": SINUSOID_LAYOUTS,
            "length_penalty_type": LENGTH_PENALTY_TYPES,
            "activation_function": ACTIVATIONS,
            "init_scheme": INIT_SCHEMES,
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}.")
        if not self.init_std > 0:
            raise ValueError(f"init_std must be positive, got {self.init_std}.")
        if self.max_length_offset < 0:
            raise ValueError(f"max_length_offset must be >= 0, got {self.max_length_offset}.")
        if self.position_offset < 0:
            raise ValueError(f"position_offset must be >= 0, got {self.position_offset}.")
        # §3: an encoder and a decoder; generate() would drop the encoder
        if self.is_encoder_decoder is not True:
            raise ValueError(
                f"is_encoder_decoder must be true for this model, got {self.is_encoder_decoder!r}."
            )


VaswaniTransformerConfig.register_for_auto_class()  # `auto_map` in every saved config.json

__all__ = [
    "FINGERPRINT_KEY",
    "INIT_SCHEMES",
    "PIPELINE_TASK",
    "PRESETS",
    "SHAPE_FREE_SETTINGS",
    "SINUSOID_LAYOUTS",
    "VaswaniTransformerConfig",
]


def _without_locally_served_pipelines(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A saved folder declares its pipeline in `custom_pipelines`, remote code for processes without this package;
    where the package has registered the task itself, its own pipeline serves it with no `trust_remote_code`, as
    its registered model classes do (transformers asks for trust whenever a config declares a pipeline)."""
    declared = kwargs.get("custom_pipelines") or {}
    if not declared:
        return kwargs
    # Imported here, for saved folders only: a config needs transformers' pipelines for nothing else.
    from transformers.pipelines import PIPELINE_REGISTRY

    if set(declared) <= set(PIPELINE_REGISTRY.get_supported_tasks()):
        return {name: value for name, value in kwargs.items() if name != "custom_pipelines"}
    return kwargs
