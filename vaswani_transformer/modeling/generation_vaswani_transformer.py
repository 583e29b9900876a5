"""§6.1 decoding: "beam search with a beam size of 4 and length penalty α = 0.6 … maximum output length … input
length + 50, but terminate early when possible", as the translation model's `generate()`.

It stands on transformers' public generation API only (docs/decisions/public-generation-api.md): `generate()`
prepares the inputs, the decoding cache, the logits processors and the stopping criteria as for any model, and
hands the decoding loop to `paper_beam_search`, its documented `custom_generate` callable, whenever the settings ask
for beam search; greedy search and sampling are transformers' own. The search is the beam search of Wu et al. (2016)
that §6.1 follows: each step keeps the 2k best continuations of the k beams; a continuation that ends (EOS, or a
stopping criterion) among the first k becomes a finished hypothesis scored log P(Y|X) / lp(Y), with
lp(Y) = ((5 + |Y|) / 6)^α (`config.length_penalty_type="gnmt"`; "hf": transformers' |Y|^α); the k best finished
hypotheses of a sentence are its translations, best first, and a sentence is final once no running beam can beat
them (or, with `early_stopping=True`, once it holds k). Scores, ties and outputs are those of transformers' search.
"""

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

import torch
from torch import distributed, nn
from transformers import GenerationConfig, GenerationMixin, StoppingCriteria, StoppingCriteriaList
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.generation import EosTokenCriteria, GenerateBeamEncoderDecoderOutput, MaxLengthCriteria
from transformers.integrations import is_deepspeed_zero3_enabled
from transformers.integrations.fsdp import is_fsdp_managed_module
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

# transformers 5.24 renamed the decoding cache `past_key_values` → `cache` in forward arguments, output fields and
# mask helpers (the old name warns until 5.40): outputs and helpers get the installed version's name.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"
# transformers' fallback decoding settings, which Seq2SeqTrainer writes into the model's generation config at its
# first generated batch; among them its default output length, which is no limit here (`generate`)
TRANSFORMERS_DEFAULTS = getattr(GenerationConfig, "_get_default_generation_params", dict)()
TRANSFORMERS_MAX_LENGTH = TRANSFORMERS_DEFAULTS.get("max_length", 20)
NEVER = -1e9  # the score of a continuation that must not be chosen (transformers' own mask value)
BLOCK = 64  # columns per block of the vocabulary (`top_continuations`)
# Stopping criteria that answer each sequence alone, so that final sentences may leave the batch (`Beams.keep`)
ROW_WISE_CRITERIA = (
    "MaxLengthCriteria",
    "EosTokenCriteria",
    "MaxTimeCriteria",
    "OwnOutputLimit",
    "StopWhen",
)


def generation_setting(generation_config: GenerationConfig, name: str) -> Any:
    """A setting as `generate()` reads it: the generation config's, or transformers' fallback where it holds none."""
    value = getattr(generation_config, name, None)
    return TRANSFORMERS_DEFAULTS.get(name) if value is None else value


def model_max_length(generation_config: GenerationConfig) -> int | None:
    """The model's own output limit in its generation config's `max_length`; None when it holds none.

    transformers' fallback `max_length` (20), which Seq2SeqTrainer writes into the generation config at its first
    generated batch, counts as none: the limit is then the longest source + `max_length_offset` (§6.1's "input
    length + 50", `generate`). A `max_length` passed to a call is the call's limit whatever its value.
    """
    max_length = getattr(generation_config, "max_length", None)
    return None if max_length == TRANSFORMERS_MAX_LENGTH else max_length


def length_penalty(kind: str, alpha: float, length: int) -> float:
    """lp(Y) for a hypothesis of `length` tokens: GNMT's ((5 + |Y|) / 6)^α, or transformers' |Y|^α ("hf").

    Args:
        kind: "gnmt" or "hf".
        alpha: α.
        length: |Y|, the generated tokens.

    Returns:
        lp(Y).
    """
    return ((5 + length) / 6) ** alpha if kind == "gnmt" else float(length) ** alpha


def top_continuations(
    log_probs: torch.Tensor, beam_scores: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The k best (score, beam, token) of each sentence, score = a beam's score + the token's log-probability.

    A top-k over the (sentences, beams · vocabulary) sums is slow on a CPU at that width, so it runs in two stages: the k best 64-wide blocks by their maxima, then the k best scores inside them. The k best
    scores lie in the k best blocks (a block holding one is beaten by fewer than k blocks): the same choice.

    Args:
        log_probs: `(sentences · beams, vocab_size)` this step's log-probabilities.
        beam_scores: `(sentences, beams)` the running beams' scores.
        k: the continuations to keep per sentence.

    Returns:
        Scores, beams and tokens of the continuations, each `(sentences, k)`, best first.
    """
    sentences, num_beams = beam_scores.shape
    vocab_size = log_probs.shape[-1]
    whole = vocab_size // BLOCK * BLOCK
    maxima = log_probs[:, :whole].unflatten(1, (-1, BLOCK)).amax(-1)  # (sentences · beams, blocks)
    if whole < vocab_size:  # the last block is narrower
        maxima = torch.cat([maxima, log_probs[:, whole:].amax(-1, keepdim=True)], dim=1)
    blocks_per_beam = maxima.shape[-1]
    if blocks_per_beam * num_beams <= k:  # a vocabulary of a few blocks: the whole matrix is small
        scores = log_probs.view(sentences, num_beams, vocab_size) + beam_scores.unsqueeze(-1)
        scores, best = scores.view(sentences, -1).topk(k)
        return scores, best // vocab_size, best % vocab_size
    maxima = maxima + beam_scores.reshape(-1, 1)
    best_blocks = maxima.view(sentences, -1).topk(k).indices  # (sentences, k), in beams · blocks
    beams = best_blocks // blocks_per_beam
    columns = (best_blocks % blocks_per_beam).unsqueeze(-1) * BLOCK + torch.arange(BLOCK, device=beams.device)
    rows = torch.arange(sentences, device=beams.device).unsqueeze(-1) * num_beams + beams  # (sentences, k)
    candidates = log_probs[rows.unsqueeze(-1), columns.clamp_max(vocab_size - 1)]  # (sentences, k, BLOCK)
    candidates = candidates.masked_fill(columns >= vocab_size, float("-inf"))
    scores, positions = (candidates + beam_scores.gather(1, beams).unsqueeze(-1)).flatten(1).topk(k)
    return scores, beams.gather(1, positions // BLOCK), columns.flatten(1).gather(1, positions)


def along_beams(history: torch.Tensor, beams: torch.Tensor) -> torch.Tensor:
    """The (sentences, beams, length) `history` of each chosen beam: `beams` (sentences, n) picks n of them."""
    return history.gather(1, beams.unsqueeze(-1).expand(-1, -1, history.shape[-1]))


@dataclass
class Beams:
    """The search's state, one row per sentence still decoding: (sentences, beams, length) token ids of the running
    beams and their (sentences, beams) log-probabilities, best first; the best finished hypotheses, padded to
    max_length after their end, their scores log P / lp (NEVER: none yet) and generated lengths; whether a running
    beam can still beat them (`open`); each row's sentence in the request (`origin`); and, for
    `return_dict_in_generate` only, each token's beam row (transformers' `beam_indices`)."""

    running: torch.Tensor
    running_scores: torch.Tensor
    finished: torch.Tensor
    finished_scores: torch.Tensor
    finished_lengths: torch.Tensor
    open: torch.Tensor
    origin: torch.Tensor
    running_paths: torch.Tensor | None = None
    finished_paths: torch.Tensor | None = None

    def keep(self, kept: torch.Tensor) -> "Beams":
        """The state of the sentences at `kept` only."""
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        return Beams(**{name: None if value is None else value[kept] for name, value in values.items()})


@dataclass
class Request:
    """What does not change during one search: beams, continuations kept per step (transformers' 2k, more with
    several end tokens), lengths, the pad and end ids, and the length penalty."""

    num_beams: int
    candidates: int
    prompt_length: int
    max_length: int
    pad: int
    ends: torch.Tensor
    penalty: str
    alpha: float
    early_stopping: bool | str
    # (sentences,) each one's limit (§6.1: its source + 50); None: max_length for all
    own_max_length: torch.Tensor | None = None


def start(input_ids: torch.Tensor, request: Request, with_paths: bool) -> Beams:
    """The state before the first step: each sentence's prompt in its first beam (the others start at NEVER, so that
    the first step's continuations come from one beam), nothing finished."""
    k, device = request.num_beams, input_ids.device
    sentences = input_ids.shape[0] // k
    scores = torch.zeros((sentences, k), device=device)
    scores[:, 1:] = NEVER
    beams = Beams(
        running=input_ids.view(sentences, k, -1),
        running_scores=scores,
        finished=input_ids.new_full((sentences, k, request.max_length), request.pad),
        finished_scores=torch.full((sentences, k), NEVER, device=device),
        finished_lengths=torch.zeros((sentences, k), dtype=torch.long, device=device),
        open=torch.ones(sentences, dtype=torch.bool, device=device),
        origin=torch.arange(sentences, device=device),
    )
    if with_paths:
        steps = request.max_length - request.prompt_length
        beams.running_paths = torch.full((sentences, k, 0), -1, dtype=torch.int32, device=device)
        beams.finished_paths = torch.full((sentences, k, steps), -1, dtype=torch.int32, device=device)
    return beams


def ended(
    stopping_criteria: Any, beams: Beams, choice: tuple[torch.Tensor, ...], request: Request
) -> torch.Tensor:
    """(sentences, candidates) whether each continuation ends its sequence: an end token or the length limit, by
    transformers' two usual criteria read directly, else by calling every criterion on the continued sequences."""
    _, from_beams, tokens = choice
    length = beams.running.shape[-1] + 1
    own = request.max_length if request.own_max_length is None else request.own_max_length[beams.origin]
    own_limit = torch.as_tensor(length >= own, device=tokens.device).reshape(-1, 1)  # (sentences or 1, 1)
    if all(isinstance(criterion, (MaxLengthCriteria, EosTokenCriteria)) for criterion in stopping_criteria):
        return torch.isin(tokens, request.ends) | own_limit
    continued = torch.cat([along_beams(beams.running, from_beams), tokens.unsqueeze(-1)], -1)
    return stopping_criteria(continued.flatten(0, 1), None).view(tokens.shape) | own_limit


def step(
    beams: Beams, choice: tuple[torch.Tensor, ...], ends: torch.Tensor, request: Request
) -> tuple[Beams, torch.Tensor]:
    """One step: the endings among the first k continuations join the finished hypotheses where they beat them
    (while their sentence is open and, with early_stopping=True, holds fewer than k), scored log P / lp(|Y|) with
    |Y| the generated tokens, the end included; the k best that did not end run on. Returns the state and the flat
    beam rows the self-attention cache must follow."""
    scores, from_beams, tokens = choice
    k, (sentences, _, length) = request.num_beams, beams.running.shape
    offsets = torch.arange(sentences, device=scores.device).unsqueeze(-1) * k
    full = (beams.finished_scores > NEVER).all(-1) & (request.early_stopping is True)
    joins = ends[:, :k] & (beams.open & ~full).unsqueeze(-1)
    generated = length + 1 - request.prompt_length
    entering = scores[:, :k] / length_penalty(request.penalty, request.alpha, generated)
    merged_scores = torch.cat([beams.finished_scores, entering.masked_fill(~joins, NEVER)], 1)
    best = merged_scores.topk(k).indices  # (sentences, k) of 2k: the old and the new hypotheses
    entered = torch.cat([along_beams(beams.running, from_beams[:, :k]), tokens[:, :k, None]], -1)
    entered = nn.functional.pad(entered, (0, request.max_length - length - 1), value=request.pad)
    lengths = torch.cat([beams.finished_lengths, torch.full_like(beams.finished_lengths, generated)], 1)
    alive = scores + ends * NEVER
    running = alive.topk(k).indices  # (sentences, k) of 2k, best first
    next_beams = from_beams.gather(1, running)
    paths = {}
    if beams.running_paths is not None:
        rows = (from_beams + offsets).int().unsqueeze(-1)  # (sentences, 2k, 1): each continuation's beam row
        candidate_paths = torch.cat([along_beams(beams.running_paths, from_beams), rows], -1)
        padding = (0, request.max_length - request.prompt_length - candidate_paths.shape[-1])
        padded = nn.functional.pad(candidate_paths[:, :k], padding, value=-1)
        paths = {
            "running_paths": along_beams(candidate_paths, running),
            "finished_paths": along_beams(torch.cat([beams.finished_paths, padded], 1), best),
        }
    next_tokens = tokens.gather(1, running).unsqueeze(-1)
    beams = replace(
        beams,
        running=torch.cat([along_beams(beams.running, next_beams), next_tokens], -1),
        running_scores=alive.gather(1, running),
        finished=along_beams(torch.cat([beams.finished, entered], 1), best),
        finished_scores=merged_scores.gather(1, best),
        finished_lengths=lengths.gather(1, best),
        **paths,
    )
    return beams, (next_beams + offsets).flatten()


def still_open(beams: Beams, request: Request) -> torch.Tensor:
    """(sentences,) whether a running beam could still beat a finished hypothesis of its sentence: its best score
    over the penalty of the best length it could reach (the limit with early_stopping="never", else its own)."""
    length = beams.running.shape[-1]
    if request.early_stopping == "never" and request.alpha > 0:
        length = request.max_length
    best_running = beams.running_scores[:, 0] / length_penalty(
        request.penalty, request.alpha, length - request.prompt_length
    )
    return beams.open & (best_running > beams.finished_scores.min(-1).values)


def final(beams: Beams, request: Request) -> torch.Tensor:
    """(sentences,) whether no later step can change a sentence's finished hypotheses."""
    full = (beams.finished_scores > NEVER).all(-1) & (request.early_stopping is True)
    return ~beams.open | full


def follow_beams(cache: Cache, rows: torch.Tensor) -> None:
    """The decoder's self-attention cache reordered to follow the beams kept (`rows`). The cross-attention cache,
    one row per sentence, needs none. A pre-allocated (static) cache is copied in place: CUDA graphs replay on
    fixed addresses."""
    cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
    if not cache.is_compileable:
        cache.reorder_cache(rows)
        return
    for layer in cache.layers:
        if layer.is_initialized:
            layer.keys.copy_(layer.keys.index_select(0, rows))
            layer.values.copy_(layer.values.index_select(0, rows))


@dataclass
class Source:
    """The source side of the decoder's steps, one row per sentence (not per beam: its beams share it)."""

    encoder_outputs: BaseModelOutput
    mask: torch.Tensor | None  # the cross-attention mask, made once
    cache: Cache | None

    def keep(self, kept: torch.Tensor, rows: torch.Tensor) -> "Source":
        """The source of the sentences at `kept` (decoder rows `rows`) only."""
        if self.cache is not None:
            self.cache.self_attention_cache.batch_select_indices(rows)
            self.cache.cross_attention_cache.batch_select_indices(kept)
        outputs = BaseModelOutput(last_hidden_state=self.encoder_outputs.last_hidden_state[kept])
        return Source(outputs, None if self.mask is None else self.mask[kept], self.cache)


def source_of(model: Any, model_kwargs: dict[str, Any], num_beams: int) -> Source:
    """One row per sentence of what `generate()` copied for every beam: the encoder output and the source mask; the
    mask as the (sentences, 1, 1, src_len) one every step's cross-attention broadcasts, made once (per step, its
    check for padding waits for the device). flex and flash attention build their own from the 2D mask."""
    encoder_states = model_kwargs["encoder_outputs"].last_hidden_state[::num_beams]
    mask = model_kwargs.get("attention_mask")
    mask = None if mask is None else mask[::num_beams]
    if mask is not None and model.config._attn_implementation in ("eager", "sdpa"):
        mask = create_bidirectional_mask(
            config=model.config,
            inputs_embeds=encoder_states[:, :1],  # one query position: the mask broadcasts over the rest
            attention_mask=mask,
            encoder_hidden_states=encoder_states,
        )
    cache = model_kwargs.get(CACHE_NAME, model_kwargs.get("past_key_values"))
    return Source(BaseModelOutput(last_hidden_state=encoder_states), mask, cache)


def can_leave(
    source: Source, stopping_criteria: Any, generation_config: GenerationConfig, synced_gpus: bool
) -> bool:
    """Whether final sentences may leave the batch: a cache whose rows can be selected (not a static one, whose
    addresses CUDA graphs keep), criteria that answer each row alone, per-step outputs not asked for, one process."""
    return (
        isinstance(source.cache, EncoderDecoderCache)
        and not source.cache.is_compileable
        and all(type(criterion).__name__ in ROW_WISE_CRITERIA for criterion in stopping_criteria)
        and not generation_config.return_dict_in_generate
        and not synced_gpus
    )


def set_aside(
    results: tuple[torch.Tensor, ...] | None, beams: Beams, leaving: torch.Tensor | None
) -> tuple[torch.Tensor, ...]:
    """The finished hypotheses, scores and lengths of every sentence of the request, those of the `leaving`
    sentences (None: all still in the batch) written at their place."""
    current = (beams.finished, beams.finished_scores, beams.finished_lengths)
    results = results or tuple(tensor.clone() for tensor in current)
    rows = slice(None) if leaving is None else leaving
    for every, now in zip(results, current, strict=True):
        every[beams.origin[rows]] = now[rows]
    return results


def peers_decoding(this_peer_decoding: bool, synced_gpus: bool, device: torch.device) -> bool:
    """Whether any process still decodes (all of them step together under DeepSpeed ZeRO-3 or FSDP)."""
    if not synced_gpus:
        return this_peer_decoding
    flag = torch.tensor(float(this_peer_decoding), device=device)
    distributed.all_reduce(flag)
    return flag.item() > 0


@torch.no_grad()
def paper_beam_search(
    model: Any,
    input_ids: torch.LongTensor,
    logits_processor: Any,
    stopping_criteria: Any,
    generation_config: GenerationConfig,
    synced_gpus: bool = False,
    own_new_tokens: torch.Tensor | None = None,
    **model_kwargs: Any,
) -> torch.LongTensor | GenerateBeamEncoderDecoderOutput:
    """§6.1 beam search (module docstring) as `generate()`'s `custom_generate`: `input_ids` (sentences · beams,
    prompt) and `model_kwargs` as generate() prepared them. Returns the best `num_return_sequences` of each
    sentence, (sentences · num_return_sequences, length), padded after their end; with `return_dict_in_generate`,
    transformers' beam output (sequences_scores, scores, beam_indices, attentions as asked).

    Args:
        model: the model decoding.
        input_ids: `(sentences · beams, prompt_len)` decoder prompts.
        logits_processor: transformers' logits processors, applied to each step's log-probabilities.
        stopping_criteria: transformers' stopping criteria.
        generation_config: the call's settings (beams, length penalty, early stopping, ...).
        synced_gpus: step with the other processes until all are done (DeepSpeed ZeRO-3, FSDP).
        own_new_tokens: `(sentences,)` each sentence's own output limit in new tokens (§6.1: its source + 50),
            where the call set none; None: the call's limit for every sentence.
        **model_kwargs: what generate() prepared: `encoder_outputs`, `attention_mask`, the cache.

    Returns:
        `(sentences · num_return_sequences, length)` output ids, or transformers' `GenerateBeamEncoderDecoderOutput`.
    """
    settings = generation_config
    end_ids = settings.eos_token_id if isinstance(settings.eos_token_id, list) else [settings.eos_token_id]
    own = None
    if own_new_tokens is not None:
        own = (input_ids.shape[1] + own_new_tokens.to(input_ids.device)).clamp(max=settings.max_length)
    request = Request(
        num_beams=settings.num_beams,
        candidates=max(2, 1 + len(end_ids)) * settings.num_beams,
        prompt_length=input_ids.shape[1],
        max_length=settings.max_length,
        own_max_length=own,
        pad=end_ids[0] if settings.pad_token_id is None else settings.pad_token_id,
        ends=torch.tensor(end_ids, device=input_ids.device),
        penalty=model.config.length_penalty_type,
        alpha=settings.length_penalty,
        early_stopping=settings.early_stopping,
    )
    wants = {
        name: getattr(settings, name)
        for name in ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
    }
    returns_dict = settings.return_dict_in_generate
    recorded: dict[str, list] = {name: [] for name in ("scores", "logits", "attentions", "cross", "hidden")}
    beams = start(input_ids, request, with_paths=returns_dict)
    source = source_of(model, model_kwargs, request.num_beams)
    leaves = can_leave(source, stopping_criteria, settings, synced_gpus)
    decoder_mask = model_kwargs.get("decoder_attention_mask")
    use_cache = model_kwargs.get("use_cache", True)
    results = None  # (finished, scores, lengths) of every sentence once some have left the batch
    log_probs_buffer, decoding, cached = None, True, False
    while True:
        flat = beams.running.flatten(0, 1)  # (sentences · beams, length)
        outputs = model(
            encoder_outputs=source.encoder_outputs,
            attention_mask=source.mask,
            decoder_input_ids=flat[:, -1:].contiguous() if cached else flat,  # fixed strides: one graph
            decoder_attention_mask=decoder_mask,
            **{CACHE_NAME: source.cache if use_cache else None},
            use_cache=use_cache,
            output_attentions=wants["output_attentions"],
            output_hidden_states=wants["output_hidden_states"],
            return_dict=True,
        )
        source.cache, cached = (getattr(outputs, CACHE_NAME), True) if use_cache else (None, False)
        if decoder_mask is not None:
            decoder_mask = torch.cat([decoder_mask, decoder_mask.new_ones((decoder_mask.shape[0], 1))], -1)
        if decoding:
            logits = outputs.logits[:, -1, :]  # (sentences · beams, vocabulary)
            # written in place each step: a new buffer each step costs a CPU page faults
            if log_probs_buffer is None:
                log_probs_buffer = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
            log_probs = torch.log_softmax(
                logits, -1, dtype=torch.float32, out=log_probs_buffer[: logits.shape[0]]
            )
            if len(logits_processor):
                log_probs = logits_processor(flat, log_probs)
            if returns_dict:
                record_step(recorded, wants, logits, log_probs, outputs)
            choice = top_continuations(log_probs, beams.running_scores, request.candidates)
            ends = ended(stopping_criteria, beams, choice, request)
            beams, rows = step(beams, choice, ends, request)
            if source.cache is not None:
                follow_beams(source.cache, rows)
            beams.open = still_open(beams, request)
            done = final(beams, request)
            # one wait for the device a step: whether any sentence decodes on, and whether any may leave
            decoding, any_done = torch.stack([~(done.all() | ends.all()), done.any()]).tolist()
            decoding = decoding and beams.running.shape[-1] < request.max_length
            if decoding and any_done and leaves:  # final sentences leave the batch, their results kept
                results = set_aside(results, beams, done)
                kept = (~done).nonzero().flatten()
                rows = (
                    kept.unsqueeze(1) * request.num_beams
                    + torch.arange(request.num_beams, device=kept.device)
                ).flatten()
                beams, source = beams.keep(kept), source.keep(kept, rows)
                decoder_mask = None if decoder_mask is None else decoder_mask[rows]
        if not peers_decoding(decoding, synced_gpus, input_ids.device):
            break
    finished, scores, lengths = (
        (beams.finished, beams.finished_scores, beams.finished_lengths)
        if results is None
        else set_aside(results, beams, None)
    )
    returned = settings.num_return_sequences
    length = request.prompt_length + int(lengths[:, :returned].max())
    sequences = finished[:, :returned, :length].flatten(0, 1)
    if not returns_dict:
        return sequences
    encoder_outputs = model_kwargs["encoder_outputs"]
    return GenerateBeamEncoderDecoderOutput(
        sequences=sequences,
        sequences_scores=scores[:, :returned].flatten() if wants["output_scores"] else None,
        scores=tuple(recorded["scores"]) if wants["output_scores"] else None,
        logits=tuple(recorded["logits"]) if wants["output_logits"] else None,
        beam_indices=beams.finished_paths[:, :returned, : length - request.prompt_length].flatten(0, 1),
        encoder_attentions=encoder_outputs.get("attentions") if wants["output_attentions"] else None,
        encoder_hidden_states=encoder_outputs.get("hidden_states") if wants["output_hidden_states"] else None,
        decoder_attentions=tuple(recorded["attentions"]) if wants["output_attentions"] else None,
        cross_attentions=tuple(recorded["cross"]) if wants["output_attentions"] else None,
        decoder_hidden_states=tuple(recorded["hidden"]) if wants["output_hidden_states"] else None,
        **{CACHE_NAME: source.cache},
    )


def record_step(
    recorded: dict[str, list],
    wants: dict[str, bool],
    logits: torch.Tensor,
    log_probs: torch.Tensor,
    outputs: Any,
) -> None:
    """One step's scores, logits, attentions and hidden states, as `return_dict_in_generate` asked for them."""
    if wants["output_scores"]:
        recorded["scores"].append(log_probs.clone())
    if wants["output_logits"]:
        recorded["logits"].append(logits.clone())
    if wants["output_attentions"]:
        recorded["attentions"].append(outputs.decoder_attentions)
        recorded["cross"].append(outputs.cross_attentions)
    if wants["output_hidden_states"]:
        recorded["hidden"].append(outputs.decoder_hidden_states)


class OwnOutputLimit(StoppingCriteria):
    """Each sequence ends at its own sentence's output limit, `own_new_tokens` new tokens after the decoder's
    `prompt_length` (§6.1: "input length + 50" is each input's), so that a sentence's translation does not depend on
    the other sentences of its batch. Rows are the sentences in order, each repeated for its returned sequences."""

    def __init__(self, own_new_tokens: torch.Tensor, prompt_length: int) -> None:
        self.limits = own_new_tokens + prompt_length

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.BoolTensor:
        limits = self.limits.to(input_ids.device)
        limits = limits.repeat_interleave(input_ids.shape[0] // limits.shape[0])  # num_return_sequences
        return input_ids.shape[-1] >= limits


def requested(
    name: str, kwargs: dict[str, Any], generation_config: Any, model_settings: GenerationConfig
) -> Any:
    """A setting as a `generate()` call asks for it: the call's keyword, its generation config's, the model's."""
    for value in (
        kwargs.get(name),
        getattr(generation_config, name, None),
        getattr(model_settings, name, None),
    ):
        if value is not None:
            return value
    return None


class VaswaniTransformerGenerationMixin(GenerationMixin):
    """`GenerationMixin` with the paper's decoding (§6.1)."""

    @contextmanager
    def settings_as_generation_reads_them(self) -> Iterator[None]:
        """The config and generation config, while they are saved, as generation reads them.

        - `config.use_cache`: whether generation caches keys and values (its generation config's `use_cache`);
          transformers' Trainer sets `config.use_cache` to False for training.
        - transformers' fallback settings unset: Seq2SeqTrainer writes them all into the generation config, among
          them `max_length=20`, which `generate` below reads as no limit but a reader of generation_config.json
          takes literally. Unset, each means what it meant before.
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

    def generate(
        self, inputs: torch.Tensor | None = None, generation_config: Any = None, **kwargs: Any
    ) -> Any:
        """`GenerationMixin.generate`, with §6.1's output limit and beam search.

        The output limit defaults to the longest source + `config.max_length_offset` ("input length + 50"): no
        `max_new_tokens` or `max_length` set, or only transformers' fallback `max_length` (20), which Seq2SeqTrainer
        writes into the generation config after its first generated batch. A call's `max_new_tokens` takes
        precedence over the model's `max_length`, without transformers' warning. Beam search (`num_beams` > 1, no
        sampling, no streamer) runs `paper_beam_search`.

        Args:
            inputs: `(batch, src_len)` source ids (or pass `input_ids=`).
            generation_config: a `GenerationConfig` for this call instead of the model's, or None.
            **kwargs: `GenerationMixin.generate`'s: `attention_mask` `(batch, src_len)`, generation settings
                (`num_beams`, `length_penalty`, `max_new_tokens`, ...), `return_dict_in_generate`, ...

        Returns:
            `(batch · num_return_sequences, out_len)` output ids, `<s>` first, padded after their end; with
            `return_dict_in_generate`, transformers' output object holding them.
        """
        model_settings = self.generation_config
        limits = [kwargs.get(name) for name in ("max_length", "max_new_tokens")]
        limits += [getattr(generation_config, name, None) for name in ("max_length", "max_new_tokens")]
        limits += [model_settings.max_new_tokens, model_max_length(model_settings)]
        source = inputs if inputs is not None else kwargs.get("input_ids")
        # each sentence's own limit, where the call sets none (§6.1: "input length + 50")
        own_new_tokens = None
        if all(limit is None for limit in limits) and source is not None:
            mask = kwargs.get("attention_mask")
            lengths = mask.sum(-1) if mask is not None else torch.full((source.shape[0],), source.shape[-1])
            own_new_tokens = lengths + self.config.max_length_offset
            kwargs["max_new_tokens"] = int(own_new_tokens.max())
        if kwargs.get("max_new_tokens") is not None and "max_length" not in kwargs:
            kwargs["max_length"] = None  # the model's max_length yields to the call's max_new_tokens
        beam_search = (
            (requested("num_beams", kwargs, generation_config, model_settings) or 1) > 1
            and not requested("do_sample", kwargs, generation_config, model_settings)
            and kwargs.get("streamer") is None  # transformers refuses a streamer for beam search
            and kwargs.get("assistant_model") is None
            and "custom_generate" not in kwargs
        )
        if beam_search:
            synced_gpus = kwargs.pop("synced_gpus", None)
            if synced_gpus is None:
                world = (
                    distributed.get_world_size()
                    if distributed.is_available() and distributed.is_initialized()
                    else 1
                )
                synced_gpus = (is_deepspeed_zero3_enabled() or is_fsdp_managed_module(self)) and world > 1
            kwargs["custom_generate"] = partial(
                paper_beam_search, synced_gpus=synced_gpus, own_new_tokens=own_new_tokens
            )
        elif own_new_tokens is not None:  # greedy search or sampling: a criterion ends each row at its limit
            prompt = kwargs.get("decoder_input_ids")
            limit = OwnOutputLimit(own_new_tokens, 1 if prompt is None else prompt.shape[-1])
            kwargs["stopping_criteria"] = StoppingCriteriaList(
                [*(kwargs.get("stopping_criteria") or ()), limit]
            )
        return super().generate(inputs, generation_config, **kwargs)
