"""Export a trained model and its tokenizer to CTranslate2, the C++ engine for serving Transformer translators.

CTranslate2's `TransformerSpec` describes our architecture exactly: post-norm layers (no final layer norm),
bias-free attention projections (its biases are optional: a converted fairseq model's are written), ReLU
feed-forward, embeddings × √d_model, one table shared by both embeddings and the softmax. Its built-in sinusoids
put all sines before all cosines, the paper's (§3.5) interleave them, and fairseq's count from 2, so the export
writes the model's own encodings as the position table (as CTranslate2 does for learned positions):
`max_positions` rows, i.e. sentences of up to that many tokens, source and output.

`cached_export` converts a model once per content: into a cache folder named by a hash of its weights, config,
tokenizer and generation config, the quantization and this package's export format, written under a temporary
name and renamed, so a killed conversion never leaves a folder that a later call would use; its manifest of
sizes and hashes proves it whole before each reuse.
"""

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..claims import claimed_output
from ..decoding.translate import BATCH_SIZE, length_sorted_batches
from ..evaluation.loading import load_for_decoding, tokenizer_files
from ..files.paths import check_new_or_empty
from ..files.reading import read_json
from ..files.writing import folder_written_whole
from ..modeling.generation_vaswani_transformer import TRANSFORMERS_MAX_LENGTH, generation_setting
from ..trust import check_remote_code
from .conversion_cache import cached_conversion, conversion_cache_dir, model_file_hashes, model_folder
from .ctranslate2_cuda import cublas_12_problem, library_error

# CTranslate2's weight types (`--quantization` of vaswani-export-ctranslate2) and the activations it implements
WEIGHT_TYPES = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16")
CTRANSLATE2_ACTIVATIONS = ("relu", "gelu")
DECODING_FILE = "decoding.json"
# What the conversion writes for a given model: bump it when that changes, so cached exports are made anew.
EXPORT_FORMAT = 1
# The most positions an export's tables hold: 0.27 GB a stack at d_model 1,024, far beyond any sentence.
MAX_EXPORT_POSITIONS = 2**16
EXPORT_AGAIN = "export the model again (vaswani-export-ctranslate2)"
CTRANSLATE2_EXTRA = "pip install 'vaswani_transformer[ctranslate2]' (or ctranslate2)"
# This package's generate() keywords as CTranslate2's translate_batch options.
CTRANSLATE2_NAMES = {
    "num_beams": "beam_size",
    "length_penalty": "length_penalty",
    "max_new_tokens": "max_decoding_length",
}


def ctranslate2_options(overrides: dict[str, Any]) -> dict[str, Any]:
    """Decoding settings in CTranslate2's names: this package's (`CTRANSLATE2_NAMES`) renamed, its own kept."""
    return {CTRANSLATE2_NAMES.get(name, name): value for name, value in overrides.items()}


def _ctranslate2() -> Any:
    """The ctranslate2 module, or an error saying how to install it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(f"Exporting needs CTranslate2: {CTRANSLATE2_EXTRA}.") from error
    return ctranslate2


def check_exportable(model: PreTrainedModel) -> None:
    """Refuse, before any work, a configuration CTranslate2's Transformer cannot express."""
    config = model.config
    if config.head_dim_k * config.num_heads != config.d_model or config.head_dim_v != config.head_dim_k:
        raise ValueError(
            f"CTranslate2 needs d_k = d_v = d_model / heads; this model has d_k={config.head_dim_k}, "
            f"d_v={config.head_dim_v}, d_model={config.d_model}, heads={config.num_heads}."
        )
    if config.activation_function not in CTRANSLATE2_ACTIVATIONS:
        raise ValueError(
            f"CTranslate2 supports the activations {CTRANSLATE2_ACTIVATIONS}; this model uses "
            f"{config.activation_function!r}."
        )


def position_table(stack: torch.nn.Module, max_positions: int) -> torch.Tensor:
    """A stack's position encodings for positions 0 … max_positions-1, shape (max_positions, d_model), in the
    model's layout and with its `position_offset` (the module applies both).

    The sinusoids are the same in both stacks; learned tables (Table 3, row E) are one per stack.
    """
    positions = stack.embed_positions
    limit = getattr(positions, "max_positions", max_positions)  # a learned table has its own length
    return positions(torch.arange(min(max_positions, limit), device=stack.device))


def _array(tensor: torch.Tensor) -> Any:
    """A float32 numpy copy of `tensor`, as the spec stores weights (CTranslate2 quantizes them itself)."""
    return tensor.detach().float().cpu().numpy()


def _set_linear(spec: Any, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _set_layer_norm(spec: Any, layer_norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _array(layer_norm.weight)
    spec.beta = _array(layer_norm.bias)


def _set_fused(spec: Any, *linears: torch.nn.Linear) -> None:
    """One CTranslate2 projection from several of ours, stacked, with their biases where they have them
    (`attention_bias`: fairseq's published models)."""
    biases = [linear.bias for linear in linears]
    bias = None if biases[0] is None else torch.cat(biases)
    _set_linear(spec, torch.cat([linear.weight for linear in linears]), bias)


def _set_attention(spec: Any, attention: torch.nn.Module, *, self_attention: bool) -> None:
    """CTranslate2 fuses Q, K, V (self-attention) or K, V (cross-attention) into one projection."""
    query, key, value = attention.q_proj, attention.k_proj, attention.v_proj
    if self_attention:
        _set_fused(spec.linear[0], query, key, value)
    else:
        _set_fused(spec.linear[0], query)
        _set_fused(spec.linear[1], key, value)
    _set_fused(spec.linear[-1], attention.out_proj)


def _set_feed_forward(spec: Any, layer: torch.nn.Module) -> None:
    feed_forward = layer.feed_forward
    _set_linear(spec.linear_0, feed_forward.fc1.weight, feed_forward.fc1.bias)
    _set_linear(spec.linear_1, feed_forward.fc2.weight, feed_forward.fc2.bias)
    _set_layer_norm(spec.layer_norm, layer.final_layer_norm)


def _set_stack(spec: Any, stack: torch.nn.Module, max_positions: int) -> None:
    spec.scale_embeddings = stack.embed_scale  # §3.4: sqrt(d_model)
    spec.position_encodings.encodings = _array(position_table(stack, max_positions))
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(stack.embed_tokens.weight)
    for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        if hasattr(layer, "encoder_attn"):
            _set_attention(layer_spec.attention, layer.encoder_attn, self_attention=False)
            _set_layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
        _set_feed_forward(layer_spec.ffn, layer)


def ctranslate2_spec(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_positions: int) -> Any:
    """The CTranslate2 `TransformerSpec` of `model`, with its vocabulary and special tokens."""
    ctranslate2 = _ctranslate2()
    check_exportable(model)
    config = model.config
    activation = getattr(ctranslate2.specs.Activation, config.activation_function.upper())
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers),
        config.num_heads,
        pre_norm=False,  # §3.1: LayerNorm(x + Sublayer(x)), and no final layer norm
        activation=activation,
    )
    _set_stack(spec.encoder, model.get_encoder(), max_positions)
    _set_stack(spec.decoder, model.get_decoder(), max_positions)
    _set_linear(spec.decoder.projection, model.lm_head.weight)
    tokens = tokenizer.convert_ids_to_tokens(list(range(config.vocab_size)))
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    spec.config.bos_token = tokenizer.convert_ids_to_tokens(config.bos_token_id)
    spec.config.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
    spec.config.unk_token = tokenizer.unk_token or tokenizer.convert_ids_to_tokens(config.pad_token_id)
    spec.config.decoder_start_token = tokenizer.convert_ids_to_tokens(config.decoder_start_token_id)
    return spec


def check_max_positions(max_positions: int, name: str = "max_positions") -> None:
    """Between 1 and MAX_EXPORT_POSITIONS (ValueError): the export holds a max_positions × d_model table per stack,
    made in memory first (10^8 positions asked for 25.6 GB)."""
    if not 1 <= max_positions <= MAX_EXPORT_POSITIONS:
        raise ValueError(
            f"{name} {max_positions:,}: give 1 to {MAX_EXPORT_POSITIONS:,} tokens (the longest sentence, "
            "source and output; the default 1,024 is the model's own position table)."
        )


def to_ctranslate2(
    model_dir: str | Path,
    output_dir: str | Path,
    *,
    quantization: str | None = None,
    max_positions: int = 1024,
    overwrite: bool = False,
    choose: str = "OUTPUT_DIR",
    trust_remote_code: bool = False,
) -> Path:
    """Convert a saved model folder (or Hub id) and its tokenizer into a CTranslate2 model folder (one that asks to
    run code of its own is refused unless `trust_remote_code`: `trust.check_remote_code`).

    The folder also gets the tokenizer's files and the model's decoding settings, so `CTranslate2Translator`
    needs nothing else. `quantization` is CTranslate2's weight type (int8 for fast CPU serving); default: float32.
    Claimed first (`claims.claimed_output`: a second writer of the folder stops, naming this one), then written
    all or nothing (`files.folder_written_whole`): into a temporary sibling, moved into place as a whole; on any
    failure nothing is left, and a full disk or read-only folder is a WriteError naming the path and `choose`
    (the flag or argument that picks another folder).
    """
    output = Path(output_dir)
    if quantization is not None and quantization not in WEIGHT_TYPES:
        raise ValueError(f"quantization must be one of {WEIGHT_TYPES}, got {quantization!r}.")
    check_max_positions(max_positions)
    # claimed before the folder is checked: no other writer gets past it meanwhile
    with claimed_output(output, choose):
        check_new_or_empty(output, overwrite, "the export")
        model, tokenizer = load_for_decoding(model_dir, device="cpu", trust_remote_code=trust_remote_code)
        spec = ctranslate2_spec(model, tokenizer, max_positions)
        spec.validate()
        spec.optimize(quantization=quantization)
        with folder_written_whole(output, choose) as folder:
            spec.save(str(folder))
            tokenizer.save_pretrained(folder)
            (folder / DECODING_FILE).write_text(
                json.dumps(decoding_defaults(model), indent=2) + "\n", encoding="utf-8"
            )
    return output


def decoding_defaults(model: PreTrainedModel) -> dict[str, Any]:
    """The model's decoding (its generation config, §6.1) as CTranslate2 options, written beside the export."""
    generation = model.generation_config
    beams = generation.num_beams or 1
    defaults = {
        "beam_size": beams,
        "length_penalty": generation_setting(generation, "length_penalty") if beams > 1 else 1.0,
        "max_length_offset": model.config.max_length_offset,
        # CTranslate2's default minimum of 1 would forbid </s> as the first token; the model allows it.
        "min_decoding_length": generation.min_new_tokens or 0,
    }
    # A model with an output limit of its own (a converted published model: fairseq's 200 tokens) keeps it;
    # generate() counts the decoder's start token in max_length, CTranslate2 only the tokens it decodes.
    if generation.max_length not in (None, TRANSFORMERS_MAX_LENGTH):
        defaults["max_decoding_length"] = generation.max_length - 1
    return defaults


def default_cache_dir() -> Path:
    """Where `cached_export` keeps conversions: HF_HOME/vaswani_transformer/ctranslate2."""
    return conversion_cache_dir("ctranslate2")


def export_record(folder: Path, quantization: str | None, max_positions: int) -> dict[str, Any]:
    """What an export of `folder` depends on: the SHA-256 of each model file, the conversion's settings,
    this package's export format and the CTranslate2 version that writes model.bin."""
    return {
        "files": model_file_hashes(folder),
        "quantization": quantization or "float32",
        "max_positions": max_positions,
        "export_format": EXPORT_FORMAT,
        "ctranslate2": _ctranslate2().__version__,
    }


def cached_export(
    model: str | Path,
    *,
    quantization: str | None = None,
    cache_dir: str | Path | None = None,
    max_positions: int = 1024,
    verify_cache: bool = False,
    trust_remote_code: bool = False,
) -> Path:
    """The CTranslate2 export of `model` (folder or Hub id), converted on the first call and reused after.

    The export lives in `cache_dir` (default: `default_cache_dir()`) under a hash of `export_record`: a
    retrained model, another quantization or a new export format gets a new folder, and a damaged one is
    converted anew (`cached_conversion`; `verify_cache`: every file's content checked, not only the small
    ones'). Returns the export's folder.
    """
    folder = model_folder(model, trust_remote_code)
    return cached_conversion(
        export_record(folder, quantization, max_positions),
        lambda staging: to_ctranslate2(
            folder,
            staging,
            quantization=quantization,
            max_positions=max_positions,
            choose="--ctranslate2_cache",
            trust_remote_code=trust_remote_code,
        ),
        ["model.bin"],
        Path(cache_dir) if cache_dir is not None else default_cache_dir(),
        "--ctranslate2_cache",
        verify_cache,
    )


def cpu_count() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class CTranslate2Translator:
    """An exported model with its tokenizer: `CTranslate2Translator(folder).translate(["I love you."])`.

    Decoding defaults to the model's own settings (read from DECODING_FILE). CTranslate2 divides a finished
    beam's log-probability by |Y|^α where the model divides by ((5 + |Y|) / 6)^α (GNMT), so beam search can pick
    a different hypothesis among close ones; greedy decoding (beam_size=1) gives the model's tokens.

    On a CPU each batch is decoded by one thread and as many batches as there are cores run at once
    (`intra_threads=1`, `inter_threads=cores`; pass them to change it): on 2 cores twice the speed of two threads
    per batch, since a batch of a small model keeps one core busy with little left to share.

    A folder whose tokenizer asks to run code of its own is refused unless `trust_remote_code`
    (`trust.check_remote_code`).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        device: str = "cpu",
        compute_type: str = "default",
        trust_remote_code: bool = False,
        **options: Any,
    ):
        ctranslate2 = _ctranslate2()
        if device == "cuda" and (problem := cublas_12_problem(device)):  # opens the pip wheel's cuBLAS 12
            raise ValueError(problem)
        folder = Path(folder)
        check_remote_code(folder, trust_remote_code)
        if device == "cpu":
            options = {"intra_threads": 1, "inter_threads": cpu_count(), **options}
        self.decoding = read_json(folder / DECODING_FILE, EXPORT_AGAIN)
        for name in tokenizer_files(folder):  # named here, not by the tokenizers library
            if name.endswith(".json"):
                read_json(folder / name, EXPORT_AGAIN)
        torch_threads = torch.get_num_threads()
        try:
            self.translator = ctranslate2.Translator(
                str(folder), device=device, compute_type=compute_type, **options
            )
        except RuntimeError as error:  # e.g. a cut model.bin
            if problem := library_error(error, device):
                raise problem from None
            raise ValueError(f"{folder / 'model.bin'} cannot be loaded ({error}): {EXPORT_AGAIN}.") from None
        # CTranslate2 sets the process's OpenMP thread count to its intra_threads, which PyTorch shares: without
        # this, PyTorch would compute on one thread from here on. Its own workers keep their setting.
        torch.set_num_threads(torch_threads)
        self.tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        if device == "cuda":
            self._open_gpu_libraries()

    def _open_gpu_libraries(self) -> None:
        """Decode one token now: CTranslate2 opens cuBLAS at its first batch on a GPU, and a missing library
        must be refused before decoding starts, naming the fix (`ctranslate2_cuda`), not halfway through it."""
        try:
            self.translator.translate_batch([[self.tokenizer.eos_token]], beam_size=1, max_decoding_length=1)
        except RuntimeError as error:
            if problem := library_error(error, "cuda"):
                raise problem from None
            raise

    def translate(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = BATCH_SIZE,
        show_progress: bool = False,
        on_batch: Callable[[int], object] | None = None,
        **overrides: Any,
    ) -> list[str]:
        """Translations of `texts` in input order; `overrides` are decoding settings in `translate`'s names
        (num_beams, length_penalty: |Y|^α, max_new_tokens) or `translate_batch`'s own (beam_size …); `on_batch` is
        called with each decoded batch's sentence count. Batches are sorted by length as `translate` sorts them,
        each limited to its longest source + the offset (§6.1); all are queued at once, so that CTranslate2's
        `inter_threads` decode several in parallel."""
        if not texts:
            return []
        options = {**self.decoding, **ctranslate2_options(overrides)}
        offset, limit = options.pop("max_length_offset"), options.pop("max_decoding_length", None)
        sources = [
            self.tokenizer.convert_ids_to_tokens(ids) for ids in self.tokenizer(list(texts))["input_ids"]
        ]
        batches = length_sorted_batches([len(tokens) for tokens in sources], batch_size)
        pending = [
            self.translator.translate_batch(
                [sources[i] for i in batch],
                max_decoding_length=limit or max(len(sources[i]) for i in batch) + offset,
                asynchronous=True,
                **options,
            )
            for batch in batches
        ]
        outputs: list[list[str]] = [[] for _ in sources]
        progress = tqdm(total=len(batches), desc="translating", unit="batch", disable=not show_progress)
        with progress:
            for batch, results in zip(batches, pending, strict=True):
                for index, result in zip(batch, results, strict=True):
                    outputs[index] = result.result().hypotheses[0]
                progress.update()
                if on_batch is not None:
                    on_batch(len(batch))
        ids = [self.tokenizer.convert_tokens_to_ids(tokens) for tokens in outputs]
        return [text.strip() for text in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]


class CTranslate2Engine:
    """The model's CTranslate2 export (`export.CTranslate2Translator`), with this package's keyword names."""

    name = "ctranslate2"

    def __init__(self, translator: CTranslate2Translator, quantize: str = "none"):
        self.translator, self.quantize = translator, quantize
        self.tokenizer = translator.tokenizer

    def translate(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        on_batch: Callable[[int], object] | None = None,
        **overrides: Any,
    ) -> list[str]:
        """Translations of `texts` in input order (`batch_size` None: `BATCH_SIZE`); `overrides` as for PyTorch
        (num_beams, length_penalty: |Y|^α)."""
        return self.translator.translate(
            texts,
            batch_size=BATCH_SIZE if batch_size is None else batch_size,
            show_progress=show_progress,
            on_batch=on_batch,
            **overrides,
        )

    def decoding_settings(self, **overrides: Any) -> dict[str, Any]:
        """What `translate` uses, as scores.json records it, in the keys `evaluation.decoding_settings` uses."""
        options = {**self.translator.decoding, **ctranslate2_options(overrides)}
        settings: dict[str, Any] = {
            "engine": self.name,
            "quantization": self.quantize,
            "num_beams": options["beam_size"],
            "do_sample": False,
            "dtype": f"{self.translator.translator.compute_type} (CTranslate2 compute type)",
        }
        if options["beam_size"] > 1:
            settings["length_penalty"] = options["length_penalty"]
            settings["length_penalty_type"] = "hf"  # CTranslate2 divides by |Y|^α, not GNMT's form
            settings["early_stopping"] = True  # the search ends when beam_size hypotheses have finished
        if "max_decoding_length" in options:
            settings["max_new_tokens"] = options["max_decoding_length"]
        else:
            settings["max_new_tokens"] = f"longest source in the batch + {options['max_length_offset']}"
        return settings
