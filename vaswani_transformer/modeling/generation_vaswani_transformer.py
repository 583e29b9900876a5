"""The paper's decoding (§6.1) as the translation model's `GenerationMixin`.

"We used beam search with a beam size of 4 and length penalty α = 0.6 … maximum output length … input length + 50,
but terminate early when possible." The model's generation config holds the beam and α; this mixin adds what
transformers' `generate()` lacks:

- the output limit "longest source + `config.max_length_offset`" when the call sets none (`generate`);
- the GNMT length penalty ((5 + |Y|) / 6)^α (`config.length_penalty_type="gnmt"`), handed to transformers' beam
  search through two of its hooks, which beam_search_vaswani_transformer.py checks at import;
- one source row per sentence, not per beam: the encoder output, the source mask and the cross-attention keys and
  values are projected, cached and read once per sentence (the model's attention groups a sentence's beams);
- the choice of beam search: plain requests (translations) go to the faster search of
  beam_search_vaswani_transformer.py, the rest to transformers'; a static cache compiles the decoding step.

Shipped beside the model file as remote code: it imports only torch, transformers and that sibling file.
"""

import copy
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import GenerationConfig, GenerationMixin
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask

from .beam_search_vaswani_transformer import beam_search, is_plain_request, pad_after_end

LIMITS = ("max_length", "max_new_tokens")
# transformers' fallback decoding settings, which Seq2SeqTrainer writes into the model's generation config at its
# first generated batch; among them its default output length
TRANSFORMERS_DEFAULTS = getattr(GenerationConfig, "_get_default_generation_params", dict)()
TRANSFORMERS_MAX_LENGTH = TRANSFORMERS_DEFAULTS.get("max_length", 20)


def generation_setting(generation_config: GenerationConfig, name: str) -> Any:
    """A setting as `generate()` reads it: the generation config's, or transformers' fallback where it holds none
    (a saved folder leaves those unset: `settings_as_generation_reads_them`)."""
    value = getattr(generation_config, name, None)
    return TRANSFORMERS_DEFAULTS.get(name) if value is None else value


# The beams of a sentence share its source: the encoder output and the cross-attention keys and values stay at one
# row per sentence (the mixin below), and a sentence's `group` consecutive decoder rows (its beams) attend to them
# as extra query positions of that one row (the model's attention and the ONNX export's decoder step).
def queries_per_source(query: torch.Tensor, sources: int) -> torch.Tensor:
    """(batch, heads, tgt_len, d) queries as (sources, heads, group · tgt_len, d), with group = batch / sources."""
    return query.unflatten(0, (sources, -1)).transpose(1, 2).flatten(2, 3)


def rows_per_beam(grouped: torch.Tensor, tgt_len: int) -> torch.Tensor:
    """(sources, heads, group · tgt_len, d) back to (batch, heads, tgt_len, d): `queries_per_source` undone."""
    return grouped.unflatten(2, (-1, tgt_len)).transpose(1, 2).flatten(0, 1)


def rows_per_source(states: torch.Tensor, sources: int) -> torch.Tensor:
    """(batch, len, d) decoder states as (sources, group · len, d): the query shape the cross-attention mask needs.
    Equal batches stay as they are (reshaping them would tie an exported graph's batch size to its example's)."""
    if states.shape[0] == sources:
        return states
    return states.reshape(sources, -1, states.shape[-1])


def gnmt_as_power_of_length(alpha: float, length: int) -> float:
    """The exponent e with length^e == ((5 + length) / 6)^alpha: the paper's penalty in transformers' form."""
    if length <= 1:
        return 0.0  # ((5 + 1) / 6)^alpha == 1 == 1^e for any e
    return alpha * math.log((5.0 + length) / 6.0) / math.log(length)


class VaswaniTransformerGenerationMixin(GenerationMixin):
    """`GenerationMixin` with the paper's decoding (§6.1) and the translation model's shortcuts."""

    @contextmanager
    def settings_as_generation_reads_them(self) -> Iterator[None]:
        """The config and generation config, while they are saved, as generation reads them.

        - `config.use_cache`: whether generation caches keys and values (its generation config's `use_cache`).
          transformers' Trainer sets `config.use_cache` to its argument's (False by default) for training; saved
          so, config.json said no cache while every `generate()` uses one.
        - transformers' fallback settings unset: Seq2SeqTrainer writes them all into the generation config, among
          them `max_length=20`, which `generate` below reads as no limit but a reader of generation_config.json
          (or of the model card made from it) takes literally. Unset, each means what it meant before.
        """
        generation, use_cache = self.generation_config, self.config.use_cache
        as_saved = copy.deepcopy(generation)
        for name, value in TRANSFORMERS_DEFAULTS.items():
            if getattr(as_saved, name, None) == value:
                setattr(as_saved, name, None)
        self.generation_config = as_saved
        self.config.use_cache = generation.use_cache is not False
        try:
            yield
        finally:
            self.generation_config, self.config.use_cache = generation, use_cache

    # §6.1 decoding: "maximum output length … input length + 50, but terminate early when possible".
    def generate(
        self, inputs: torch.Tensor | None = None, generation_config: Any = None, **kwargs: Any
    ) -> Any:
        """`GenerationMixin.generate`, defaulting the output limit to the longest source + `max_length_offset`.

        transformers' own default `max_length` (20) in the model's generation config is not a limit here:
        Seq2SeqTrainer writes it there after its first generated batch, which capped every later batch at 20
        tokens and warned that `max_new_tokens` and `max_length` were both set. A `max_new_tokens` of the call
        takes precedence over the model's `max_length` (as in transformers), without that warning.
        """
        model_max_length = self.generation_config.max_length
        limits = [kwargs.get(name) for name in LIMITS] + [
            getattr(generation_config, name, None) for name in LIMITS
        ]
        limits += [
            self.generation_config.max_new_tokens,
            None if model_max_length == TRANSFORMERS_MAX_LENGTH else model_max_length,
        ]
        source = inputs if inputs is not None else kwargs.get("input_ids")
        if all(limit is None for limit in limits) and source is not None:
            mask = kwargs.get("attention_mask")
            source_length = int(mask.sum(-1).max()) if mask is not None else source.shape[-1]
            kwargs["max_new_tokens"] = source_length + self.config.max_length_offset
        if kwargs.get("max_new_tokens") is not None and "max_length" not in kwargs:
            kwargs["max_length"] = None  # the model's max_length yields to the call's max_new_tokens
        return super().generate(inputs, generation_config, **kwargs)

    # transformers copies the encoder output and the source mask for every beam (and every returned sequence).
    # They stay at one row per sentence instead: the cross-attention keys/values are then projected, cached and
    # read once per source, not once per beam (1/num_beams of the cross-attention cache and its memory traffic).
    def _expand_inputs_for_generation(
        self,
        expand_size: int = 1,
        is_encoder_decoder: bool = False,
        input_ids: torch.LongTensor | None = None,
        **model_kwargs: Any,
    ) -> tuple[torch.LongTensor | None, dict[str, Any]]:
        per_source = ("encoder_outputs", "attention_mask")
        shared = {key: model_kwargs.pop(key) for key in per_source if key in model_kwargs}
        if shared.get("attention_mask") is not None and shared.get("encoder_outputs") is not None:
            shared["attention_mask"] = self._cross_attention_mask(
                shared["attention_mask"], shared["encoder_outputs"]
            )
        input_ids, model_kwargs = super()._expand_inputs_for_generation(
            expand_size=expand_size, is_encoder_decoder=False, input_ids=input_ids, **model_kwargs
        )
        return input_ids, {**model_kwargs, **shared}

    def _cross_attention_mask(self, source_mask: torch.Tensor, encoder_outputs: Any) -> torch.Tensor | None:
        """The (sources, 1, 1, src_len) mask every decoding step's cross-attention broadcasts, made once.

        Made per step from the 2D source mask, transformers' mask helper checks whether anything is padded (a host
        sync: the GPU waits at every step). Once per generation it is one check; None when nothing is padded (sdpa).
        flex and flash attention keep the 2D mask: they build their own (a block mask holds one query length).
        """
        if source_mask.ndim != 2 or self.config._attn_implementation not in ("eager", "sdpa"):
            return source_mask
        encoder_states = encoder_outputs[0]  # (sources, src_len, d_model)
        return create_bidirectional_mask(
            config=self.config,
            inputs_embeds=encoder_states[:, :1],  # one query position: the mask broadcasts over the rest
            attention_mask=source_mask,
            encoder_hidden_states=encoder_states,
        )

    # Beam search keeps the beams that scored best; only the decoder's self-attention cache follows them. Every
    # beam of a sentence holds the same source, so its cross-attention keys/values (one row per sentence, see
    # above) need no reordering.
    # A pre-allocated (static) cache is reordered in place: CUDA graphs replay on fixed addresses, and transformers'
    # reorder gives every layer new tensors, after a length check that waits for the GPU.
    def _reorder_cache(self, past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        cache = (
            past_key_values.self_attention_cache
            if isinstance(past_key_values, EncoderDecoderCache)
            else past_key_values
        )
        if not cache.is_compileable:
            cache.reorder_cache(beam_idx)
            return past_key_values
        for layer in cache.layers:
            if layer.is_initialized:
                layer.keys.copy_(layer.keys.index_select(0, beam_idx))
                layer.values.copy_(layer.values.index_select(0, beam_idx))
        return past_key_values

    # Plain requests (the translations of `translate`, the pipeline and the commands) go to the sibling module's
    # beam search, which picks each step's continuations with less work over the vocabulary and otherwise follows
    # transformers' step for step; the rest to transformers'. transformers compiles the decoding step of greedy
    # search over a static cache (on GPUs with CUDA graphs), but its beam search calls the model uncompiled. Under
    # the same conditions (static cache, a GPU or compile_config, compiling not disabled) beam search's steps run
    # through a compiled forward too; a forward set on the model (say, compiled by hand) is used as it is. Both
    # searches' outputs are padded with the pad id after EOS, as greedy search's are (`pad_after_end`).
    def _beam_search(
        self,
        input_ids: torch.LongTensor,
        logits_processor: Any,
        stopping_criteria: Any,
        generation_config: Any,
        synced_gpus: bool = False,
        **model_kwargs: Any,
    ) -> Any:
        compiles = "forward" not in vars(self) and self._valid_auto_compile_criteria(
            model_kwargs, generation_config
        )
        if compiles:
            self.forward = self._compiled_forward(generation_config.compile_config)
        try:
            if is_plain_request(generation_config, logits_processor, synced_gpus):
                output = beam_search(self, input_ids, stopping_criteria, generation_config, **model_kwargs)
            else:
                search = (input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus)
                output = super()._beam_search(*search, **model_kwargs)
        finally:
            if compiles:
                del self.forward  # back to the class's forward
        if isinstance(output, torch.Tensor):
            return pad_after_end(output, input_ids.shape[1], generation_config)
        output.sequences = pad_after_end(output.sequences, input_ids.shape[1], generation_config)
        return output

    def _compiled_forward(self, compile_config: Any) -> Callable:
        """`forward` compiled with `compile_config` (transformers' default: CUDA graphs), kept for reuse.

        Not transformers' `get_compiled_call`: that compiles `__call__`, which calls `forward`, so set as the
        forward it would call itself.
        """
        compile_config = compile_config or self._default_compile_config()
        if getattr(self, "_forward_compile_config", None) != compile_config:
            self._forward_compile_config = compile_config
            self._forward_compiled = torch.compile(
                type(self).forward.__get__(self), **compile_config.to_dict()
            )
        return self._forward_compiled

    # As transformers' greedy search does, the prefill (the first step, which also sets up the static cache) runs
    # uncompiled and only the one-token steps replay the compiled forward. Compiled, the prefill set up the cache
    # inside a graph, and the next step's CUDA graph, which reads and increments the cache's length counter, crashed
    # the process (a segmentation fault with torch 2.11 and transformers 5.17; not with graph partitions off).
    def _prefill(self, *args: Any, **kwargs: Any) -> Any:
        step = vars(self).get("forward")
        if step is None or step is not getattr(self, "_forward_compiled", None):
            return super()._prefill(*args, **kwargs)
        del self.forward  # the class's forward for this one call
        try:
            return super()._prefill(*args, **kwargs)
        finally:
            self.forward = step

    # transformers divides a finished beam's log-probability by |Y|^length_penalty. With length_penalty_type
    # "gnmt" we hand it, at each length, the exponent that makes that divisor ((5 + |Y|) / 6)^α instead.
    def _update_finished_beams(
        self, *, cur_len: int, decoder_prompt_len: int, length_penalty: float, **kwargs: Any
    ):
        if self.config.length_penalty_type == "gnmt":
            length_penalty = gnmt_as_power_of_length(length_penalty, cur_len + 1 - decoder_prompt_len)
        return super()._update_finished_beams(
            cur_len=cur_len, decoder_prompt_len=decoder_prompt_len, length_penalty=length_penalty, **kwargs
        )

    def _check_early_stop_heuristic(
        self,
        *,
        cur_len: int,
        decoder_prompt_len: int,
        length_penalty: float,
        early_stopping: Any,
        **kwargs: Any,
    ):
        if self.config.length_penalty_type == "gnmt":
            length = kwargs["max_length"] if early_stopping == "never" else cur_len
            length_penalty = gnmt_as_power_of_length(length_penalty, length - decoder_prompt_len)
        return super()._check_early_stop_heuristic(
            cur_len=cur_len,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
            **kwargs,
        )
