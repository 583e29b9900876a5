"""Decoding through CUDA graphs with a few shapes: `translate(..., cuda_graphs=True)` and the pipeline's.

On a GPU every decoding step is a few hundred tiny kernels, and the step costs their launches, whatever the batch.
Over a static (pre-allocated) cache `generate()` compiles the step (a compile_config's; transformers' default:
CUDA graphs), one graph per input shape. Batches come in many shapes, so each is padded up to one of a few (`bucketed_generate`):

- its sentences to a power of two (copies of its last sentence, whose translations are dropped);
- its source length to a power of two (at least 16), with at least one padded position, so that every batch has a
  source mask (a batch without one would compile a graph of its own);
- the static cache to a power of two at or above the output limit.

Each bucket's static cache is made once and kept on the model (`bucket_cache`), reset before each reuse: CUDA
graphs replay on fixed addresses, and a new cache per call would make every graph be recorded again (and past
torch's re-record limit, 128, not replayed at all). The caches of the buckets used stay allocated with the model.

Refused (ValueError, naming the fix) where graphs cannot apply: sampling, `disable_compile`, a model off the GPU
without a compile_config that compiles everywhere, several batches decoding at once.

transformers compiles greedy search's step itself; the model's beam search (§6.1) calls the model's forward, so
for beam search `compiled_steps` sets a compiled forward on the model for the call: the first call (the prefill,
which sets up the static cache) runs the class's forward, as transformers' greedy search does — compiled, the
prefill set up the cache inside a graph and the next step's graph crashed the process (torch 2.11, transformers
5.17) — and every later step the compiled one.
"""

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import CompileConfig, PreTrainedModel
from transformers.cache_utils import EncoderDecoderCache, StaticCache

from ..modeling.generation_vaswani_transformer import CACHE_NAME, model_max_length

SHORTEST_SOURCE_BUCKET = 16
SHORTEST_CACHE_BUCKET = 64
# One graph per bucket (sentences, beams, source length, cache length): more than dynamo's default limit of 8 per
# function (past it dynamo decodes uncompiled, with a warning), but bounded: powers of two of each.
GRAPH_LIMIT = 256


def cuda_graphs_compile_config() -> CompileConfig:
    """transformers' default compile_config (CUDA graphs: mode "reduce-overhead"), with one graph per shape
    (`dynamic=False`): each bucket replays its own graph, and no symbolic shapes are traced."""
    return CompileConfig(dynamic=False)


def bucket(count: int, smallest: int = 1) -> int:
    """The power of two at or above `count`, at least `smallest`."""
    return max(smallest, 1 << max(count - 1, 0).bit_length())


def check_cuda_graphs(
    model: PreTrainedModel, generate_kwargs: dict[str, Any], workers: int | None = None
) -> None:
    """Refuse (ValueError naming the fix) what CUDA-graph decoding cannot do, before anything decodes."""
    sampling = generate_kwargs.get("do_sample")
    if sampling or (sampling is None and model.generation_config.do_sample):
        raise ValueError(
            "cuda_graphs decodes by search (greedy or beam), not sampling: drop do_sample or cuda_graphs."
        )
    if generate_kwargs.get("disable_compile"):
        raise ValueError("cuda_graphs compiles the decoding step: drop disable_compile or cuda_graphs.")
    compile_config = generate_kwargs.get("compile_config")
    compiles_here = compile_config is not None and compile_config._compile_all_devices
    if model.device.type != "cuda" and not compiles_here:
        raise ValueError(
            f"cuda_graphs needs the model on a CUDA GPU, not {model.device.type}: move it there "
            "(model.to('cuda')) or drop cuda_graphs."
        )
    if workers is not None and workers != 1:
        raise ValueError(f"cuda_graphs decodes one batch at a time, not {workers}: drop workers.")


def cache_length(model: PreTrainedModel, longest_source: int, generate_kwargs: dict[str, Any]) -> int:
    """The static cache's length: a bucket at or above every output limit generate() may apply to this batch
    (the call's or the model's max_new_tokens or max_length, else the longest source + max_length_offset)."""
    generation = model.generation_config
    limits = (
        generate_kwargs.get("max_new_tokens"),
        generate_kwargs.get("max_length"),
        generation.max_new_tokens,
        model_max_length(generation),
        longest_source + getattr(model.config, "max_length_offset", 0),
    )
    return bucket(max(limit for limit in limits if limit is not None) + 1, SHORTEST_CACHE_BUCKET)


def padded_to_buckets(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, pad_token_id: int, max_positions: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch with its sentences and source length padded up to their buckets (module docstring)."""
    sentences, length = input_ids.shape
    width = min(bucket(length + 1, SHORTEST_SOURCE_BUCKET), max(max_positions, length))
    rows = bucket(sentences)
    padded_ids = input_ids.new_full((rows, width), pad_token_id)
    padded_mask = attention_mask.new_zeros((rows, width))
    padded_ids[:sentences, :length], padded_mask[:sentences, :length] = input_ids, attention_mask
    padded_ids[sentences:, :length], padded_mask[sentences:, :length] = input_ids[-1], attention_mask[-1]
    return padded_ids, padded_mask


def bucket_cache(
    model: PreTrainedModel, sentences: int, rows: int, self_length: int, source_length: int
) -> EncoderDecoderCache:
    """The static cache of one bucket (sentences, whose cross-attention keys are one row each; decoder rows, one
    per beam; self-attention and source lengths; device and precision), made once per model and reset before every
    reuse, so that its tensors keep their addresses."""
    device = model.device.type
    precision = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else model.dtype
    key = (sentences, rows, self_length, source_length, str(model.device), precision)
    caches = vars(model).setdefault("_cuda_graph_caches", {})
    if key in caches:
        caches[key].reset()
    else:
        config = model.config.get_text_config(decoder=True)
        caches[key] = EncoderDecoderCache(
            StaticCache(config=config, max_cache_len=self_length),
            StaticCache(config=config, max_cache_len=source_length),
        )
    return caches[key]


@contextmanager
def graphs_allowed(limit: int = GRAPH_LIMIT) -> Iterator[None]:
    """dynamo's per-function compile limit raised to `limit` for the call, and set back after."""
    with torch._dynamo.config.patch(recompile_limit=max(limit, torch._dynamo.config.recompile_limit)):
        yield


def compiled_forward(model: PreTrainedModel, compile_config: CompileConfig) -> Callable:
    """The model's forward compiled with `compile_config`, made once per model and config and kept."""
    kept = vars(model).get("_compiled_forward")
    if kept is None or kept[0] != compile_config:
        kept = (compile_config, torch.compile(type(model).forward.__get__(model), **compile_config.to_dict()))
        vars(model)["_compiled_forward"] = kept
    return kept[1]


@contextmanager
def compiled_steps(model: PreTrainedModel, compile_config: CompileConfig) -> Iterator[None]:
    """For one generate(): the model's forward uncompiled at its first call (the prefill), compiled after
    (module docstring). A forward already set on the model (say, compiled by hand) is used as it is."""
    if "forward" in vars(model):
        yield
        return
    plain, compiled = type(model).forward.__get__(model), compiled_forward(model, compile_config)
    calls = 0

    def forward(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return (plain if calls == 1 else compiled)(*args, **kwargs)

    model.forward = forward
    try:
        yield
    finally:
        del model.forward


def bucketed_generate(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, **generate_kwargs: Any
) -> torch.Tensor:
    """`model.generate` over its bucket's static cache with a compiled step, the batch padded up to its buckets;
    the output rows of the batch's own sentences (`num_return_sequences` each)."""
    sentences, generation = input_ids.shape[0], model.generation_config
    padded_ids, padded_mask = padded_to_buckets(
        input_ids, attention_mask, model.config.pad_token_id, model.config.max_position_embeddings
    )
    beams = generate_kwargs.get("num_beams") or generation.num_beams or 1
    returned = generate_kwargs.get("num_return_sequences") or generation.num_return_sequences or 1
    self_length = cache_length(model, int(attention_mask.sum(-1).max()), generate_kwargs)
    rows = padded_ids.shape[0]
    cache = bucket_cache(model, rows, rows * max(beams, returned), self_length, padded_ids.shape[1])
    settings = {
        **generate_kwargs,
        CACHE_NAME: cache,
        "compile_config": generate_kwargs.get("compile_config") or cuda_graphs_compile_config(),
    }
    steps = compiled_steps(model, settings["compile_config"]) if beams > 1 else contextlib.nullcontext()
    with graphs_allowed(), steps:
        output = model.generate(input_ids=padded_ids, attention_mask=padded_mask, **settings)
    return output[: sentences * returned]
