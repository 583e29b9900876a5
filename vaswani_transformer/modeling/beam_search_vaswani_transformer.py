"""Beam search (§6.1) with less work over the vocabulary, for the plain requests that decode translations.

transformers' beam search spends most of a small model's decoding step on the vocabulary, not in the model: it
copies the logits, adds every beam's score to all beams × vocabulary log-probabilities, and takes the 2k best of
that (sentences, beams · vocabulary) matrix with `torch.topk`, whose CPU kernel is slow at that width. This search
follows transformers' loop step for step and calls its own helpers for all the bookkeeping (finished beams, the
early-stopping heuristic, the cache reorder, the GNMT hooks of the model), but picks the 2k best continuations in
two stages: the maximum of every 64-wide block of each beam's log-probabilities plus the beam's score, the 2k best
blocks of the sentence, then the 2k best scores inside those blocks. The 2k best scores of a sentence lie in its 2k
best blocks (a block that holds one is beaten by fewer than 2k blocks), so the choice is the same; the
log-probabilities are transformers' own (log_softmax in float32) and the scores the same sums, so they are equal
too; only ties between equal scores may be broken otherwise. It also lets sentences leave the batch once their
beams are final (docs/decisions/sentences-leave-the-beam.md).

Used when a request is plain (`is_plain_request`); the model's `_beam_search` (generation_vaswani_transformer.py)
sends anything else to transformers' own. Both rest on private helpers of transformers' search: the guard at the
bottom (`check_beam_search_hooks`) refuses, at import, a transformers whose search no longer calls them as this
module and the GNMT length penalty need. Shipped beside the model file as remote code: it imports only torch and
transformers.
"""

import inspect
from typing import Any

import torch
from transformers import GenerationMixin
from transformers import __version__ as transformers_version
from transformers.cache_utils import EncoderDecoderCache
from transformers.utils import ModelOutput

BLOCK = 64  # columns per block: one pass of block maxima, then a top-k over vocabulary / 64 blocks per beam


def is_plain_request(generation_config: Any, logits_processor: Any, synced_gpus: bool) -> bool:
    """Whether this search gives what transformers' would: greedy choice among beams, nothing reshaping the
    log-probabilities, only the sequences returned, and no processes to keep in step; and whether the installed
    transformers has every helper it calls (`FAST_SEARCH_HELPERS`)."""
    return (
        HAS_FAST_SEARCH_HELPERS
        and not generation_config.do_sample
        and len(logits_processor) == 0
        and not generation_config.return_dict_in_generate
        and not synced_gpus
        and not generation_config.low_memory
    )


def block_maxima(log_probs: torch.Tensor) -> torch.Tensor:
    """The maximum of each BLOCK-wide block of every row, the last block possibly narrower: (rows, blocks)."""
    vocab_size = log_probs.shape[-1]
    whole = vocab_size // BLOCK * BLOCK
    maxima = log_probs[:, :whole].unflatten(1, (-1, BLOCK)).amax(-1)
    if whole < vocab_size:
        maxima = torch.cat([maxima, log_probs[:, whole:].amax(-1, keepdim=True)], dim=1)
    return maxima


def top_continuations(
    log_probs: torch.Tensor, running_beam_scores: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The k best (score, beam, token) of each sentence, score = a beam's score + the token's log-probability.

    log_probs: (sentences · beams, vocabulary); running_beam_scores: (sentences, beams). Returns three
    (sentences, k) tensors, best first, as transformers' `topk` over (sentences, beams · vocabulary) gives them.
    """
    sentences, num_beams = running_beam_scores.shape
    vocab_size = log_probs.shape[-1]
    maxima = block_maxima(log_probs) + running_beam_scores.reshape(-1, 1)  # (sentences · beams, blocks)
    blocks_per_beam = maxima.shape[-1]
    if blocks_per_beam * num_beams <= k:  # a vocabulary of a few blocks: the whole matrix is small
        scores = log_probs.view(sentences, num_beams, vocab_size) + running_beam_scores.unsqueeze(-1)
        scores, best = scores.view(sentences, -1).topk(k)
        return scores, best // vocab_size, best % vocab_size
    best_blocks = maxima.view(sentences, -1).topk(k).indices  # (sentences, k), in beams · blocks
    beams = best_blocks // blocks_per_beam
    columns = (best_blocks % blocks_per_beam).unsqueeze(-1) * BLOCK + torch.arange(BLOCK, device=beams.device)
    rows = torch.arange(sentences, device=beams.device).unsqueeze(-1) * num_beams + beams  # (sentences, k)
    inside = columns < vocab_size  # the last block may be narrower
    candidates = log_probs[rows.unsqueeze(-1), columns.clamp_max(vocab_size - 1)]  # (sentences, k, BLOCK)
    candidates = candidates.masked_fill(~inside, float("-inf")) + running_beam_scores.gather(
        1, beams
    ).unsqueeze(-1)
    scores, positions = candidates.flatten(1).topk(k)  # (sentences, k)
    chosen_beams = beams.gather(1, positions // BLOCK)
    tokens = columns.flatten(1).gather(1, positions)
    return scores, chosen_beams, tokens


# Sentences leave the batch once their finished beams are final. transformers' search keeps decoding every
# sentence until the last one ends (a third of the rows of a Multi30k batch of 64 are such idle sentences); a
# sentence's finished beams can no longer change once its early-stop heuristic is satisfied (every later candidate
# is scored -1e9) or, with early_stopping=True, once all its beams are finished. Dropping such sentences changes
# no output; it needs a cache whose rows can be selected (not the static cache, whose addresses CUDA graphs keep),
# and stopping criteria that answer each row alone: transformers' own, and the pipeline's UntilSet (every row alike),
# which translate()'s workers pass (docs/decisions/decoding-batches.md).
STATELESS_CRITERIA = ("MaxLengthCriteria", "EosTokenCriteria", "MaxTimeCriteria", "UntilSet")


def final_sentences(
    is_early_stop_heuristic_unsatisfied: torch.Tensor, is_sent_finished: torch.Tensor, early_stopping: Any
) -> torch.Tensor:
    """(sentences,) True where no later step can change a sentence's finished beams."""
    final = ~is_early_stop_heuristic_unsatisfied[:, 0]
    if early_stopping is True:
        final |= is_sent_finished.all(-1)
    return final


def drops_final_sentences(
    model_kwargs: dict[str, Any], cache_name: str | None, stopping_criteria: Any
) -> bool:
    """Whether the batch can shrink: a selectable encoder-decoder cache, sentence-wise stopping criteria, and no
    model input other than those `keep_sentences` selects."""
    cache = model_kwargs.get(cache_name) if cache_name is not None else None
    tensors = {key for key, value in model_kwargs.items() if isinstance(value, torch.Tensor)}
    return (
        isinstance(cache, EncoderDecoderCache)
        and not cache.is_compileable
        and isinstance(model_kwargs.get("encoder_outputs"), ModelOutput)
        and all(type(criterion).__name__ in STATELESS_CRITERIA for criterion in stopping_criteria)
        and tensors <= {"attention_mask", "decoder_attention_mask", "cache_position"}
    )


def rows_at(value: torch.Tensor | tuple[torch.Tensor, ...], index: torch.Tensor) -> Any:
    """The rows at `index` of a tensor, or of each tensor of a tuple (an output's hidden states)."""
    return value[index] if isinstance(value, torch.Tensor) else tuple(state[index] for state in value)


def keep_sentences(
    model_kwargs: dict[str, Any], cache_name: str, sentences: torch.Tensor, num_beams: int
) -> dict[str, Any]:
    """The model inputs of the `sentences` (indices) only: one row per sentence for the source side (encoder
    output, source mask, cross-attention cache), `num_beams` rows per sentence for the decoder side."""
    rows = (sentences.unsqueeze(1) * num_beams + torch.arange(num_beams, device=sentences.device)).flatten()
    cache = model_kwargs[cache_name]
    cache.self_attention_cache.batch_select_indices(rows)
    cache.cross_attention_cache.batch_select_indices(sentences)
    encoder_outputs = model_kwargs["encoder_outputs"]
    encoder_outputs = type(encoder_outputs)(
        **{name: rows_at(value, sentences) for name, value in encoder_outputs.items()}
    )
    kept = {**model_kwargs, "encoder_outputs": encoder_outputs}
    for name, index in (("attention_mask", sentences), ("decoder_attention_mask", rows)):
        if isinstance(kept.get(name), torch.Tensor):
            kept[name] = kept[name][index]
    return kept


def beam_search(
    model: Any,
    input_ids: torch.LongTensor,
    stopping_criteria: Any,
    generation_config: Any,
    **model_kwargs: Any,
) -> torch.LongTensor:
    """transformers' `GenerationMixin._beam_search` for a plain request (`is_plain_request`), returning the
    sequences; the continuations of each step come from `top_continuations`."""
    pad_token_id = generation_config._pad_token_tensor
    eos_token_id = generation_config._eos_token_tensor
    early_stopping = generation_config.early_stopping
    length_penalty = generation_config.length_penalty
    max_length = generation_config.max_length
    num_beams = generation_config.num_beams
    device = input_ids.device
    batch_size, cur_len = input_ids.shape[0] // num_beams, input_ids.shape[1]
    decoder_prompt_len = cur_len
    beams_to_keep = max(2, 1 + (eos_token_id.shape[0] if eos_token_id is not None else 0)) * num_beams
    top_num_beam_mask = torch.arange(beams_to_keep, device=device) < num_beams
    # transformers fills with EOS when the pad id is 0 (`0 or eos`); kept, so both searches give the same tensors
    fill_value = pad_token_id or eos_token_id[0] if eos_token_id is not None else -1

    # (sentences, beams, max_length) sequences and (sentences, beams) scores, as transformers initialises them
    running_sequences = torch.full(
        (batch_size, num_beams, max_length), fill_value, dtype=torch.int64, device=device
    )
    running_sequences[:, :, :cur_len] = model._unflatten_beam_dim(input_ids, batch_size, num_beams)
    sequences = running_sequences.clone()
    running_beam_scores = torch.zeros((batch_size, num_beams), dtype=torch.float, device=device)
    running_beam_scores[:, 1:] = -1e9  # only the first beam's continuations count at the first step
    beam_scores = torch.full((batch_size, num_beams), -1e9, dtype=torch.float, device=device)
    is_sent_finished = torch.zeros((batch_size, num_beams), dtype=torch.bool, device=device)
    is_early_stop_heuristic_unsatisfied = torch.ones((batch_size, 1), dtype=torch.bool, device=device)
    running_beam_indices = torch.full(
        (batch_size, num_beams, max_length - cur_len), -1, dtype=torch.int32, device=device
    )
    beam_indices = running_beam_indices.clone()
    batch_offset = torch.arange(batch_size, device=device).view(-1, 1) * num_beams
    cache_name = next((name for name in ("past_key_values", "cache") if name in model_kwargs), None)
    drops_sentences = drops_final_sentences(model_kwargs, cache_name, stopping_criteria)
    origin = torch.arange(batch_size, device=device)  # each row's sentence in the request
    results = None  # (sequences, beam_indices) of every sentence, once some have left the batch

    model_outputs = model._prefill(
        input_ids, generation_config, model_kwargs, is_first_iteration=not generation_config.is_assistant
    )
    this_peer_finished, log_probs_buffer = False, None
    while not this_peer_finished:
        if model_outputs is None:
            flat_running_sequences = model._flatten_beam_dim(running_sequences[:, :, :cur_len])
            model_inputs = model.prepare_inputs_for_generation(
                flat_running_sequences,
                next_sequence_length=1 if model_kwargs["use_cache"] else None,
                **model_kwargs,
            )
            model_outputs = model(**model_inputs, return_dict=True)
        model_kwargs = model._update_model_kwargs_for_generation(
            model_outputs, model_kwargs, is_encoder_decoder=model.config.is_encoder_decoder
        )
        logits = model_outputs.logits[:, -1, :]  # (sentences · beams, vocabulary)
        # written in place each step: a new buffer each step costs the CPU page faults
        if log_probs_buffer is None:
            log_probs_buffer = torch.empty(logits.shape, dtype=torch.float32, device=device)
        log_probs = log_probs_buffer[: logits.shape[0]]  # its first rows once sentences have left the batch
        torch.log_softmax(logits, dim=-1, dtype=torch.float32, out=log_probs)
        model_outputs = None
        topk_log_probs, topk_beams, topk_ids = top_continuations(
            log_probs, running_beam_scores, beams_to_keep
        )
        topk_running_beam_indices = model._gather_beams(running_beam_indices, topk_beams)
        topk_running_sequences = model._gather_beams(running_sequences, topk_beams)
        topk_running_sequences[:, :, cur_len] = topk_ids
        topk_running_beam_indices[:, :, cur_len - decoder_prompt_len] = topk_beams + batch_offset

        next_token_hits_stopping_criteria = model._unflatten_beam_dim(
            stopping_criteria(model._flatten_beam_dim(topk_running_sequences[:, :, : cur_len + 1]), None),
            batch_size,
            beams_to_keep,
        )
        running_sequences, running_beam_scores, running_beam_indices = (
            model._get_running_beams_for_next_iteration(
                topk_log_probs=topk_log_probs,
                topk_running_sequences=topk_running_sequences,
                topk_running_beam_indices=topk_running_beam_indices,
                next_token_hits_stopping_criteria=next_token_hits_stopping_criteria,
                num_beams=num_beams,
            )
        )
        sequences, beam_scores, beam_indices, is_sent_finished = model._update_finished_beams(
            sequences=sequences,
            topk_running_sequences=topk_running_sequences,
            beam_scores=beam_scores,
            topk_log_probs=topk_log_probs,
            beam_indices=beam_indices,
            topk_running_beam_indices=topk_running_beam_indices,
            is_early_stop_heuristic_unsatisfied=is_early_stop_heuristic_unsatisfied,
            is_sent_finished=is_sent_finished,
            next_token_hits_stopping_criteria=next_token_hits_stopping_criteria,
            top_num_beam_mask=top_num_beam_mask,
            num_beams=num_beams,
            cur_len=cur_len,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
        )
        if cache_name is not None:
            beam_idx = model._flatten_beam_dim(running_beam_indices[..., cur_len - decoder_prompt_len])
            model_kwargs[cache_name] = model._reorder_cache(model_kwargs[cache_name], beam_idx)
        cur_len += 1
        is_early_stop_heuristic_unsatisfied = model._check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=is_early_stop_heuristic_unsatisfied,
            running_beam_scores=running_beam_scores,
            beam_scores=beam_scores,
            is_sent_finished=is_sent_finished,
            cur_len=cur_len,
            max_length=max_length,
            decoder_prompt_len=decoder_prompt_len,
            early_stopping=early_stopping,
            length_penalty=length_penalty,
        )
        unfinished = model._beam_search_has_unfinished_sequences(
            is_early_stop_heuristic_unsatisfied,
            is_sent_finished,
            next_token_hits_stopping_criteria,
            early_stopping,
        )
        if not drops_sentences:
            this_peer_finished = not unfinished
            continue
        final = final_sentences(is_early_stop_heuristic_unsatisfied, is_sent_finished, early_stopping)
        unfinished, any_final = torch.stack([unfinished, final.any()]).tolist()  # still one host sync a step
        this_peer_finished = not unfinished
        if unfinished and any_final:  # the final sentences leave the batch, their results kept
            results = results or (sequences.clone(), beam_indices.clone())
            done, kept = final.nonzero().flatten(), (~final).nonzero().flatten()
            results[0][origin[done]], results[1][origin[done]] = sequences[done], beam_indices[done]
            (
                running_sequences,
                running_beam_scores,
                running_beam_indices,
                sequences,
                beam_scores,
                beam_indices,
                is_sent_finished,
                is_early_stop_heuristic_unsatisfied,
                origin,
            ) = (
                state[kept]
                for state in (
                    running_sequences,
                    running_beam_scores,
                    running_beam_indices,
                    sequences,
                    beam_scores,
                    beam_indices,
                    is_sent_finished,
                    is_early_stop_heuristic_unsatisfied,
                    origin,
                )
            )
            model_kwargs = keep_sentences(model_kwargs, cache_name, kept, num_beams)
            batch_size = kept.shape[0]
            batch_offset = batch_offset[:batch_size]
    if results is not None:
        results[0][origin], results[1][origin] = sequences, beam_indices
        sequences, beam_indices = results

    # the best num_return_sequences of each sentence, cut to the longest generated length
    num_return_sequences = generation_config.num_return_sequences
    sequences = model._flatten_beam_dim(sequences[:, :num_return_sequences, :])
    beam_indices = model._flatten_beam_dim(beam_indices[:, :num_return_sequences, :])
    generated = (beam_indices + 1).bool().sum(dim=1).max()
    return sequences[:, : decoder_prompt_len + generated]


def pad_after_end(
    sequences: torch.LongTensor, prompt_length: int, generation_config: Any
) -> torch.LongTensor:
    """Beam search's sequences with the pad id after each one's first generated EOS. transformers' beam search
    fills them with EOS when the pad id is 0 (`pad or eos`, a falsy tensor); greedy search pads with the pad id,
    and lengths are counted by it. Sequences that ran to the length limit are left as they are."""
    pad_token_id = generation_config._pad_token_tensor
    eos_token_id = generation_config._eos_token_tensor
    if pad_token_id is None or eos_token_id is None:
        return sequences
    ends = torch.isin(sequences[:, prompt_length:], eos_token_id).int()  # (sequences, generated)
    after_end = (ends.cumsum(dim=1) - ends) > 0  # an EOS came earlier
    padded = sequences.clone()
    padded[:, prompt_length:] = padded[:, prompt_length:].masked_fill(after_end, pad_token_id)
    return padded


# The transformers-version guard. The GNMT penalty rests on two private hooks of transformers' beam search. Should a
# transformers release rename them, change their keywords or stop calling them, beam search would silently fall
# back to |Y|^α: refuse instead, at import. The fast search also calls transformers' other private helpers; where
# one is missing, requests go to transformers' own search (slower, the same translations).
BEAM_SEARCH_HOOKS = {
    "_update_finished_beams": ("cur_len", "decoder_prompt_len", "length_penalty"),
    "_check_early_stop_heuristic": (
        "cur_len",
        "decoder_prompt_len",
        "length_penalty",
        "early_stopping",
        "max_length",
    ),
}


FAST_SEARCH_HELPERS = (
    "_prefill",
    "_gather_beams",
    "_flatten_beam_dim",
    "_unflatten_beam_dim",
    "_get_running_beams_for_next_iteration",
    "_beam_search_has_unfinished_sequences",
    "_update_model_kwargs_for_generation",
    "prepare_inputs_for_generation",
)


def check_beam_search_hooks(mixin: type = GenerationMixin) -> None:
    """Raise ImportError unless `mixin`'s beam search calls both hooks with the keywords the GNMT penalty uses."""
    try:
        search_source = inspect.getsource(mixin._beam_search)
    except (AttributeError, OSError, TypeError):
        search_source = None  # no source to read (e.g. a frozen install): the signatures are still checked
    for name, keywords in BEAM_SEARCH_HOOKS.items():
        hook = getattr(mixin, name, None)
        parameters = inspect.signature(hook).parameters if callable(hook) else {}
        missing = [keyword for keyword in keywords if keyword not in parameters]
        not_called = search_source is not None and f"self.{name}(" not in search_source
        if hook is None or missing or not_called:
            problem = (
                "is missing" if hook is None else f"lacks {missing}" if missing else "is no longer called"
            )
            raise ImportError(
                f"transformers {transformers_version}: GenerationMixin.{name} {problem}, so the paper's GNMT "
                "length penalty (§6.1) cannot be applied. Install a supported transformers (>=5.17,<6)."
            )


check_beam_search_hooks()
HAS_FAST_SEARCH_HELPERS = all(callable(getattr(GenerationMixin, name, None)) for name in FAST_SEARCH_HELPERS)
