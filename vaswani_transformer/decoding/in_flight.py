"""In-flight beam search: the paper's beam search (§6.1) over a batch that sentences join at step boundaries and
leave as soon as they are final, so that none waits for another to end (docs/decisions/in-flight-batching.md).

Each step is the model's own search step (`paper_beam_search` in generation_vaswani_transformer.py: the 2k best
continuations of the k beams, endings scored log P / lp(|Y|), the k best hypotheses kept, a sentence final once no
running beam can beat them), run over sentences of different ages at once:

- each sentence has its own generated length, output limit (its source + 50, §6.1, or the request's) and α; the
  decoder's self-attention keys and values live in buffers kept from step to step (`BeamRows`: each step's written
  in place, rows reordered by one copy), left-padded to the oldest sentence's length, a mask hides each row's
  padding, and each row's token stands at its own position (§3.5);
- newcomers join between steps: one encoder pass for all of them, their cross-attention keys and values appended to
  the batch's (sources right-padded to the longest, masked), their beams started as `generate()` starts them;
- a final sentence leaves at once with its best hypotheses: the step's reordering of the beams' rows (which copies
  them anyway) takes only the rows that stay, and the columns no row needs any more are left behind.

So a sentence's translation is the one `generate()` gives it alone, whatever decodes beside it, up to the rounding
of products whose shapes differ. The model runs through its public modules (the decoder's `embed`, its layers,
`lm_head`) on transformers' `EncoderDecoderCache` and `Cache`; the package, not a saved folder, carries this search.
"""

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask

from ..modeling.generation_vaswani_transformer import NEVER, along_beams, length_penalty, top_continuations

# The attention kernels whose masks this search builds as `generate()` does (boolean, 4-D).
MASKED_KERNELS = ("eager", "sdpa")
# `BeamRows`' smallest buffers: rows (beams of sentences) and columns (tokens); they grow and shrink from there
MIN_ROWS, MIN_COLUMNS = 64, 64


@dataclass(frozen=True)
class Wanted:
    """A sentence to translate: its source token ids (the end token included), its output limit in new tokens, its
    α, how many hypotheses to return (at most the beams), and the caller's handle for it."""

    ids: Sequence[int]
    max_new_tokens: int
    alpha: float
    n_best: int = 1
    tag: Hashable = None


@dataclass(frozen=True)
class Done:
    """A final sentence: its handle, and its best hypotheses (generated token ids, the end token included where
    one ended it) with their scores log P / lp, best first."""

    tag: Hashable
    hypotheses: list[list[int]]
    scores: list[float]


@dataclass
class Rows:
    """The state of the sentences decoding, one row per sentence (its k beams inside): the running beams' token
    histories, left-padded (S, k, T), and their log-probabilities (S, k); the hypotheses that ended, right-aligned
    (S, k, W), their scores (NEVER: none yet) and lengths; whether a running beam can still beat them; each
    sentence's generated tokens, output limit and α; its encoder output, right-padded (S, src_len, d_model), and
    source mask."""

    history: torch.Tensor
    running_scores: torch.Tensor
    finished: torch.Tensor
    finished_scores: torch.Tensor
    finished_lengths: torch.Tensor
    open: torch.Tensor
    generated: torch.Tensor
    limits: torch.Tensor
    sources: torch.Tensor
    source_mask: torch.Tensor

    def select(self, kept: torch.Tensor) -> "Rows":
        """The rows of the sentences at `kept` only."""
        return Rows(**{field.name: getattr(self, field.name)[kept] for field in fields(self)})


def pad_to(tensor: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    """`tensor` padded with `value` on its last dimension to `width`, on the left or the right."""
    missing = width - tensor.shape[-1]
    if missing <= 0:
        return tensor
    return nn.functional.pad(tensor, (missing, 0) if left else (0, missing), value=value)


def right_aligned(tokens: torch.Tensor, width: int, pad: int) -> torch.Tensor:
    """The last `width` columns of (…, length) `tokens`, left-padded with `pad` where there are fewer."""
    return pad_to(tokens[..., -width:], width, pad, left=True)


@functools.cache
def penalty(kind: str, alpha: float, length: int) -> float:
    """lp(|Y|) as the model's search computes it (a Python float, so that scores round as there)."""
    return length_penalty(kind, alpha, length)


class BeamRows(Cache):
    """The decoder's self-attention keys and values of every beam row, layer by layer, in (rows, heads, columns,
    d_k) buffers kept from step to step, as transformers' static cache keeps them: `update` (the attention's) writes
    a step's keys and values into the next column in place and returns the columns in use, where a growing cache
    would copy all of them each step. The beams' reordering copies the rows kept into a second set of buffers
    (`select`), newcomers take rows at the end (`add_rows`), and columns no row needs any more are left behind
    (`keep_columns`). Buffers grow as rows and columns are needed and shrink to half when a quarter of them is
    used. They start at zero: a row's columns before its sentence joined are masked, never NaN."""

    def __init__(self, layers: int) -> None:
        super().__init__(layers=[])  # the buffers below hold the keys and values, not transformers' layers
        self.layer_count = layers
        self.buffers: list[list[torch.Tensor]] = []  # [keys, values] of each layer
        self.spare: list[list[torch.Tensor]] = []  # the same shapes: `select` copies into them, then swaps
        self.rows, self.start, self.end = 0, 0, 0  # the rows in use; the columns in use, [start, end)

    @property
    def width(self) -> int:
        """The columns in use: the oldest sentence's tokens before this step's."""
        return self.end - self.start

    @property
    def capacity(self) -> tuple[int, int]:
        """The buffers' rows and columns."""
        return self.buffers[0][0].shape[0], self.buffers[0][0].shape[2]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's (rows, heads, 1, d) keys and values of layer `layer_idx` written into the next column;
        returns the layer's keys and values of every column in use, this step's included."""
        if not self.buffers:
            self._allocate(key_states, rows=max(MIN_ROWS, self.rows), columns=MIN_COLUMNS)
        elif self.end == self.capacity[1]:  # the last column is used: move back, or resize
            rows, columns = self.capacity
            if 4 * self.width < columns and columns > MIN_COLUMNS:
                self._allocate(key_states, rows, columns // 2)
            elif 2 * self.width <= columns:
                self.select(torch.arange(self.rows, device=key_states.device), to_start=True)
            else:
                self._allocate(key_states, rows, 2 * columns)
        keys, values = self.buffers[layer_idx]
        keys[: self.rows, :, self.end] = key_states[:, :, -1]
        values[: self.rows, :, self.end] = value_states[:, :, -1]
        used = slice(self.start, self.end + 1)
        if layer_idx == self.layer_count - 1:
            self.end += 1
        return keys[: self.rows, :, used], values[: self.rows, :, used]

    def _allocate(self, like: torch.Tensor, rows: int, columns: int) -> None:
        """New zeroed buffers of `rows` × `columns`, holding the columns in use at their start."""
        heads, dim = like.shape[1], like.shape[3]
        shape = (rows, heads, columns, dim)
        fresh = [[like.new_zeros(shape), like.new_zeros(shape)] for _ in range(self.layer_count)]
        for old, new in zip(self.buffers, fresh, strict=False):
            for before, after in zip(old, new, strict=True):
                after[: self.rows, :, : self.width] = before[: self.rows, :, self.start : self.end]
        self.buffers, self.spare = fresh, []  # the old ones freed before the spare set is made
        self.spare = [[like.new_zeros(shape), like.new_zeros(shape)] for _ in range(self.layer_count)]
        self.start, self.end = 0, self.width

    def select(self, rows: torch.Tensor, to_start: bool = False) -> None:
        """Only `rows` stay, in their order (the beams kept, whose rows they continue): one copy of the columns in
        use (`to_start`: to the buffers' first columns)."""
        if self.buffers:
            into = slice(0, self.width) if to_start else slice(self.start, self.end)
            for used, spare in zip(self.buffers, self.spare, strict=True):
                for source, target in zip(used, spare, strict=True):
                    found = source[: self.rows, :, self.start : self.end]
                    torch.index_select(found, 0, rows, out=target[: len(rows), :, into])
            self.buffers, self.spare = self.spare, self.buffers
            if to_start:
                self.start, self.end = 0, self.width
        self.rows = len(rows)
        if self.buffers and MIN_ROWS < self.capacity[0] > 4 * self.rows:
            self._allocate(self.buffers[0][0], max(MIN_ROWS, 2 * self.rows), self.capacity[1])

    def add_rows(self, count: int) -> None:
        """`count` rows more at the end, for newcomers: masked where their sentences have no tokens yet."""
        if self.buffers and self.rows + count > self.capacity[0]:
            rows = (self.rows + count) * 5 // 4 + MIN_ROWS // 2  # a quarter more: no copy at each join
            self._allocate(self.buffers[0][0], rows, self.capacity[1])
        self.rows += count

    def keep_columns(self, count: int) -> None:
        """Only the last `count` columns are in use from now on (the oldest sentence's)."""
        self.start = self.end - count


class InFlightSearch:
    """§6.1 beam search with `num_beams` beams over the sentences given to `join`, one `step` at a time; a
    sentence leaves in the `Done` of the step that made it final, or at the next step after `drop`.

    The caller holds `torch.no_grad()` and the precision's autocast around every call (both are per thread), and
    keeps the model in eval mode.
    """

    def __init__(self, model: PreTrainedModel, num_beams: int) -> None:
        if model.config._attn_implementation not in MASKED_KERNELS:
            raise ValueError(
                f"In-flight decoding builds eager and sdpa attention masks, not {model.config._attn_implementation}'s."
            )
        settings, config = model.generation_config, model.config
        ends = settings.eos_token_id if isinstance(settings.eos_token_id, list) else [settings.eos_token_id]
        self.model, self.decoder, self.num_beams = model, model.get_decoder(), num_beams
        self.penalty_kind = config.length_penalty_type
        # one beam is greedy search (generate()'s for num_beams=1): a sentence ends at its first ending
        self.early_stopping = True if num_beams == 1 else settings.early_stopping
        self.start_id = settings.decoder_start_token_id
        if self.start_id is None:
            self.start_id = config.decoder_start_token_id
        self.pad = ends[0] if settings.pad_token_id is None else settings.pad_token_id
        self.ends = torch.tensor(ends, device=model.device)
        self.candidates = max(2, 1 + len(ends)) * num_beams  # transformers' 2k, more with several end tokens
        self.rows: Rows | None = None
        self.cache: EncoderDecoderCache | None = None
        self.cross_mask: torch.Tensor | None = None
        # on the host, one entry per sentence: its handle, source length, n-best, α, generated tokens, output limit
        self.tags: list[Hashable] = []
        self.source_lengths: list[int] = []
        self.n_best: list[int] = []
        self.alphas: list[float] = []
        self.generated: list[int] = []
        self.limits: list[int] = []
        self.dropped: list[bool] = []  # its request has gone: it leaves at the next step

    def __len__(self) -> int:
        """The sentences decoding."""
        return len(self.tags)

    def join(self, wanted: Sequence[Wanted]) -> None:
        """Start decoding `wanted` at the next step: their encoder pass (one for all), then their beams among the
        others', each started as `generate()` starts it (the decoder's start token in its first beam, the other
        beams at NEVER, so that the first step's continuations come from one beam)."""
        if not wanted:
            return
        if any(item.n_best > self.num_beams or item.max_new_tokens < 1 for item in wanted):
            raise ValueError(
                f"Each sentence needs 1 to {self.num_beams} hypotheses and a limit of at least 1."
            )
        device = self.model.device
        longest = max(len(item.ids) for item in wanted)
        input_ids = torch.full((len(wanted), longest), self.pad, dtype=torch.long)
        source_mask = torch.zeros((len(wanted), longest), dtype=torch.long)
        for row, item in enumerate(wanted):
            input_ids[row, : len(item.ids)] = torch.as_tensor(item.ids)
            source_mask[row, : len(item.ids)] = 1
        input_ids, source_mask = input_ids.to(device), source_mask.to(device)
        sources = self.model.get_encoder()(input_ids=input_ids, attention_mask=source_mask).last_hidden_state
        cross = [layer.encoder_attn.keys_values(sources, None, True) for layer in self.decoder.layers]
        newcomers = self._new_rows(wanted, sources, source_mask)
        if self.rows is None:
            self.rows = newcomers
            self.cache = EncoderDecoderCache(
                BeamRows(len(self.decoder.layers)), DynamicCache(ddp_cache_data=cross)
            )
            self.cache.self_attention_cache.add_rows(len(wanted) * self.num_beams)
        else:
            self._append(newcomers, cross)
        self.tags += [item.tag for item in wanted]
        self.source_lengths += [len(item.ids) for item in wanted]
        self.n_best += [item.n_best for item in wanted]
        self.alphas += [float(item.alpha) for item in wanted]
        self.generated += [0] * len(wanted)
        self.limits += [item.max_new_tokens for item in wanted]
        self.dropped += [False] * len(wanted)
        self._mask_sources()

    def _new_rows(self, wanted: Sequence[Wanted], sources: torch.Tensor, source_mask: torch.Tensor) -> Rows:
        """The newcomers' rows: histories as wide as the batch's (padding, then the start token), nothing
        finished, hypotheses as wide as the widest output limit."""
        count, k, device = len(wanted), self.num_beams, sources.device
        width = 1 if self.rows is None else self.rows.history.shape[-1]
        history = torch.full((count, k, width), self.pad, dtype=torch.long, device=device)
        history[:, :, -1] = self.start_id
        scores = torch.zeros((count, k), device=device)
        scores[:, 1:] = NEVER
        limits = torch.tensor([item.max_new_tokens for item in wanted], device=device)
        finished_width = max(self.limits + [int(limits.max())])
        return Rows(
            history=history,
            running_scores=scores,
            finished=torch.full((count, k, finished_width), self.pad, dtype=torch.long, device=device),
            finished_scores=torch.full((count, k), NEVER, device=device),
            finished_lengths=torch.zeros((count, k), dtype=torch.long, device=device),
            open=torch.ones(count, dtype=torch.bool, device=device),
            generated=torch.zeros(count, dtype=torch.long, device=device),
            limits=limits,
            sources=sources,
            source_mask=source_mask,
        )

    def _append(self, newcomers: Rows, cross: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """The newcomers' rows after the batch's, every tensor padded to the wider of the two: hypotheses on the
        left (they are right-aligned), sources and their cross-attention keys and values on the right; their beams
        take the self-attention cache's next rows, which their mask hides until they hold their keys.

        transformers' cache has no public call that adds rows, so each cross-attention `DynamicLayer`'s `keys` and
        `values` (the (sentences, heads, length, d) tensors its `update` concatenates to) are replaced here."""
        rows = self.rows
        finished_width = max(rows.finished.shape[-1], newcomers.finished.shape[-1])
        source_width = max(rows.sources.shape[1], newcomers.sources.shape[1])
        joined = {}
        for field in fields(Rows):
            old, new = getattr(rows, field.name), getattr(newcomers, field.name)
            if field.name == "finished":
                old, new = (pad_to(t, finished_width, self.pad, left=True) for t in (old, new))
            elif field.name == "source_mask":
                old, new = (pad_to(t, source_width, 0, left=False) for t in (old, new))
            elif field.name == "sources":
                old, new = (
                    pad_to(t.transpose(1, 2), source_width, 0, False).transpose(1, 2) for t in (old, new)
                )
            joined[field.name] = torch.cat([old, new])
        self.rows = Rows(**joined)
        for layer, (keys, values) in zip(self.cache.cross_attention_cache.layers, cross, strict=True):
            layer.keys, layer.values = (
                torch.cat([_pad_length(old, source_width), _pad_length(new.to(old.dtype), source_width)])
                for old, new in ((layer.keys, keys), (layer.values, values))
            )
        self.cache.self_attention_cache.add_rows(newcomers.history.shape[0] * self.num_beams)

    def _mask_sources(self) -> None:
        """The cross-attention mask, (sentences, 1, 1, src_len), made once per change of the batch as `generate()`
        makes it once per call."""
        self.cross_mask = create_bidirectional_mask(
            config=self.model.config,
            inputs_embeds=self.rows.sources[:, :1],  # one query position: the mask broadcasts over the rest
            attention_mask=self.rows.source_mask,
            encoder_hidden_states=self.rows.sources,
        )

    def step(self) -> list[Done]:
        """One decoding step for every sentence; returns those it made final, which have left the batch (as have
        the sentences dropped)."""
        if not self.tags:
            return []
        log_probs = self._next_log_probs()
        choice = top_continuations(log_probs, self.rows.running_scores, self.candidates)
        beam_rows = self._advance(choice)
        final = self._final().tolist()
        done = [self._hypotheses(index) for index, is_final in enumerate(final) if is_final]
        kept = [index for index, is_final in enumerate(final) if not (is_final or self.dropped[index])]
        if len(kept) == len(final):
            self.cache.self_attention_cache.select(beam_rows.flatten())
        else:  # the rows that stay, reordered: one copy of the cache for both
            self.cache.self_attention_cache.select(beam_rows[kept].flatten())
            self._keep(kept)
        return done

    def _next_log_probs(self) -> torch.Tensor:
        """(sentences · beams, vocabulary) float32 log-probabilities of each running beam's next token: its last
        token at its own position, attending to its own earlier tokens only."""
        rows, k = self.rows, self.num_beams
        tokens = rows.history[:, :, -1].reshape(-1, 1)  # (sentences · beams, 1)
        positions = rows.generated.repeat_interleave(k).unsqueeze(1)  # (sentences · beams, 1)
        width = self.cache.self_attention_cache.width + 1  # the keys after this step's
        seen = torch.arange(width, device=tokens.device) >= width - 1 - positions  # (rows, width)
        hidden = self.decoder.embed(tokens, positions)  # (sentences · beams, 1, d_model)
        for layer in self.decoder.layers:
            hidden = layer(
                hidden,
                seen[:, None, None, :],  # (rows, 1, 1, width): each row's own tokens
                rows.sources,
                encoder_attention_mask=self.cross_mask,
                past_key_values=self.cache,
            )
        logits = self.model.lm_head(hidden)[:, -1, :]  # (sentences · beams, vocabulary)
        return torch.log_softmax(logits, -1, dtype=torch.float32)

    def _lengths_penalised(self, lengths: list[int]) -> torch.Tensor:
        """(sentences, 1) lp of each sentence's `lengths` with its own α."""
        values = [penalty(self.penalty_kind, a, n) for a, n in zip(self.alphas, lengths, strict=True)]
        return torch.tensor(values, device=self.rows.running_scores.device).unsqueeze(-1)

    def _advance(self, choice: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The search's step (`step` of the model's search, with each sentence's own length and limit): endings among
        the first k continuations join the hypotheses where they beat them, and the k best that did not end run on.
        Returns the (sentences, beams) rows of the self-attention cache that the beams kept continue."""
        scores, from_beams, tokens = choice
        rows, k = self.rows, self.num_beams
        at_limit = (rows.generated + 1 >= rows.limits).unsqueeze(-1)  # (sentences, 1)
        ends = torch.isin(tokens, self.ends) | at_limit  # (sentences, 2k)
        full = (rows.finished_scores > NEVER).all(-1) & (self.early_stopping is True)
        joins = ends[:, :k] & (rows.open & ~full).unsqueeze(-1)
        lengths = [count + 1 for count in self.generated]
        entering = scores[:, :k] / self._lengths_penalised(lengths)
        merged_scores = torch.cat([rows.finished_scores, entering.masked_fill(~joins, NEVER)], 1)
        best = merged_scores.topk(k).indices  # (sentences, k) of 2k: the old and the new hypotheses
        continued = torch.cat([along_beams(rows.history, from_beams[:, :k]), tokens[:, :k, None]], -1)
        entered = right_aligned(continued, rows.finished.shape[-1], self.pad)
        new_lengths = (rows.generated + 1).unsqueeze(-1).expand(-1, k)
        alive = scores + ends * NEVER
        running = alive.topk(k).indices  # (sentences, k) of 2k, best first
        next_beams = from_beams.gather(1, running)
        offsets = torch.arange(len(self.tags), device=scores.device).unsqueeze(-1) * k
        self.rows = Rows(
            history=torch.cat(
                [along_beams(rows.history, next_beams), tokens.gather(1, running)[..., None]], -1
            ),
            running_scores=alive.gather(1, running),
            finished=along_beams(torch.cat([rows.finished, entered], 1), best),
            finished_scores=merged_scores.gather(1, best),
            finished_lengths=torch.cat([rows.finished_lengths, new_lengths], 1).gather(1, best),
            open=rows.open,
            generated=rows.generated + 1,
            limits=rows.limits,
            sources=rows.sources,
            source_mask=rows.source_mask,
        )
        self.generated = lengths
        self.rows.open = self._still_open()
        return next_beams + offsets

    def _still_open(self) -> torch.Tensor:
        """(sentences,) whether a running beam could still beat a hypothesis of its sentence: its best score over the
        penalty of the best length it could reach (its limit with early_stopping="never", else its own)."""
        rows = self.rows
        reach = self.generated
        if self.early_stopping == "never":
            reach = [
                limit if alpha > 0 else length
                for limit, alpha, length in zip(self.limits, self.alphas, self.generated, strict=True)
            ]
        best_running = rows.running_scores[:, :1] / self._lengths_penalised(reach)
        return rows.open & (best_running[:, 0] > rows.finished_scores.min(-1).values)

    def _final(self) -> torch.Tensor:
        """(sentences,) whether no later step can change a sentence's hypotheses."""
        full = (self.rows.finished_scores > NEVER).all(-1) & (self.early_stopping is True)
        return ~self.rows.open | full

    def _hypotheses(self, index: int) -> Done:
        """Sentence `index`'s best hypotheses, as many as it asked for (and has)."""
        rows = self.rows
        count = self.n_best[index]
        scores = rows.finished_scores[index, :count].tolist()
        lengths = rows.finished_lengths[index, :count].tolist()
        tokens = rows.finished[index, :count].tolist()
        kept = [(row[len(row) - n :], score) for row, n, score in zip(tokens, lengths, scores, strict=True)]
        kept = [(row, score) for row, score in kept if score > NEVER]
        return Done(self.tags[index], [row for row, _ in kept], [score for _, score in kept])

    def drop(self, tags: set[Hashable]) -> int:
        """The sentences of `tags` leave the batch unfinished at the next step (their requests are gone); returns how
        many were still decoding."""
        dropped = 0
        for index, tag in enumerate(self.tags):
            if tag in tags and not self.dropped[index]:
                self.dropped[index] = True
                dropped += 1
        return dropped

    def _keep(self, kept: list[int]) -> None:
        """Only the sentences at `kept` decode on (the self-attention cache, reordered, holds their rows only
        already); the columns no row needs any more are cut off."""
        for name in ("tags", "source_lengths", "n_best", "alphas", "generated", "limits", "dropped"):
            values = getattr(self, name)
            setattr(self, name, [values[index] for index in kept])
        if not kept:
            self.rows = self.cache = self.cross_mask = None
            return
        sentences = torch.tensor(kept, device=self.rows.history.device)
        rows = self.rows.select(sentences)
        self.cache.cross_attention_cache.batch_select_indices(sentences)
        # the oldest sentence's tokens, the longest output limit and the longest source that remain
        history_width, finished_width = max(self.generated) + 1, max(self.limits)
        source_width = max(self.source_lengths)
        rows.history, rows.finished = rows.history[..., -history_width:], rows.finished[..., -finished_width:]
        rows.sources, rows.source_mask = rows.sources[:, :source_width], rows.source_mask[:, :source_width]
        self.rows = rows
        # each row's keys so far, one fewer than its tokens: the oldest sentence's
        self.cache.self_attention_cache.keep_columns(history_width - 1)
        for layer in self.cache.cross_attention_cache.layers:
            layer.keys, layer.values = layer.keys[:, :, :source_width], layer.values[:, :, :source_width]
        self._mask_sources()


def _pad_length(states: torch.Tensor, width: int) -> torch.Tensor:
    """(rows, heads, length, d) keys or values padded with zeros to `width` positions, on the right."""
    return nn.functional.pad(states, (0, 0, 0, width - states.shape[2]))
