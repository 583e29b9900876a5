"""`translate()`: many texts translated with the model's decoding (§6.1), in length-sorted batches that fit in
memory, two at once on a multi-core CPU, with progress, CUDA graphs and sentence splitting on request.

The package's runtime around the model's `generate()` (docs/architecture.md): a saved folder does not carry it.
It decodes float32 weights in bfloat16 (autocast) where the device computes it faster than float32 at the model's
width (`precision.decoding_precision`); pass `dtype=torch.float32` to keep float32.
"""

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from functools import partial
from typing import Any, overload

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteria, StoppingCriteriaList

from ..modeling.pipeline_vaswani_transformer import check_generate_arguments
from ..precision import autocast_to, decoding_precision
from . import BATCH_SIZE
from .cuda_graphs import bucket, bucketed_generate, check_cuda_graphs
from .memory import host_room
from .sentences import splitting_language, translate_by_sentences
from .translation_inputs import cap_source_lengths, has_words

logger = logging.getLogger(__name__)


class DecodingBudgetError(ValueError):
    """A batch whose decoding would need more memory than the device has free."""


def free_memory_bytes(device: torch.device) -> int | None:
    """Memory the device can still give: the GPU's free memory, or what the host leaves this process, the least
    of its free memory, the process's limits and its cgroup's (`memory.host_room`); None when
    it cannot be read.

    Args:
        device: the device to decode on.

    Returns:
        Bytes free for decoding, or None.
    """
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    room = host_room()
    return None if room is None else room.bytes


def decoding_bytes(config: Any, sentences: int, beams: int, source_tokens: int, new_tokens: int) -> int:
    """A generous estimate of the memory beam search holds for one batch: float32 log-probabilities over the
    vocabulary for every beam (and their copies), the growing self-attention cache (two copies while it grows),
    the cross-attention cache and the encoder's attention scores.

    Args:
        config: the model's config (`d_model`, `vocab_size`, `num_decoder_layers`, `num_heads`).
        sentences: sentences in the batch.
        beams: beams a sentence.
        source_tokens: the longest source's tokens.
        new_tokens: the most tokens a translation may take.

    Returns:
        The estimate, in bytes.
    """
    rows, width = sentences * beams, config.d_model * 4
    vocabulary = 3 * rows * config.vocab_size * 4
    self_attention = 2 * 2 * config.num_decoder_layers * rows * (new_tokens + 1) * width
    cross_attention = 2 * config.num_decoder_layers * sentences * source_tokens * width
    encoder_scores = 2 * sentences * config.num_heads * source_tokens**2 * 4
    return vocabulary + self_attention + cross_attention + encoder_scores


def check_decoding_budget(
    model: PreTrainedModel,
    sentences: int,
    source_tokens: int,
    generate_kwargs: dict[str, Any],
    in_flight: int = 1,
) -> None:
    """Refuse (DecodingBudgetError) a batch whose decoding would not fit in the device's free memory, `in_flight`
    such batches at once, before it starts, naming the settings to lower.

    Args:
        model: the model, on its device.
        sentences: sentences in the batch.
        source_tokens: the longest source's tokens.
        generate_kwargs: `generate()`'s options of the call (`num_beams`, `max_new_tokens`).
        in_flight: batches decoding at once.

    Raises:
        DecodingBudgetError: the batches would not fit.
    """
    config, generation = model.config, model.generation_config
    beams = generate_kwargs.get("num_beams") or generation.num_beams or 1
    new_tokens = generate_kwargs.get("max_new_tokens") or source_tokens + config.max_length_offset
    needed, free = (
        in_flight * decoding_bytes(config, sentences, beams, source_tokens, new_tokens),
        free_memory_bytes(model.device),
    )
    if free is not None and needed > free:
        batches = "a batch" if in_flight == 1 else f"{in_flight} batches at once, each"
        room = None if model.device.type == "cuda" else host_room()
        limit = room.limit if room else ""  # the process's or its cgroup's limit that leaves `free`, if any
        raise DecodingBudgetError(
            f"decoding {batches} of {sentences:,} sentence(s) with {beams:,} beam(s) ({source_tokens:,} source and "
            f"up to {new_tokens:,} new tokens, vocabulary {config.vocab_size:,}) needs about {needed / 2**30:,.1f} "
            f"GiB, but {free / 2**30:,.1f} GiB are free{limit}: lower --num_beams or --batch_size"
            f"{', or raise the limit' if limit else ''}."
        )


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), so little padding is decoded.

    Args:
        lengths: each sentence's token count.
        batch_size: sentences a batch, at least 1.

    Returns:
        The batches, each a list of indices into `lengths`.

    Raises:
        ValueError: `batch_size` below 1.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def batch_size_within_budget(
    model: PreTrainedModel, encodings: list[list[int]], generate_kwargs: dict[str, Any]
) -> int:
    """`BATCH_SIZE` sentences, halved until a batch of the longest sources fits in memory (at least one).

    Args:
        model: the model, on its device.
        encodings: the sources' token ids.
        generate_kwargs: `generate()`'s options of the call.

    Returns:
        The batch size.
    """
    longest = max(len(ids) for ids in encodings)
    batch_size = min(BATCH_SIZE, len(encodings))
    while batch_size > 1:
        try:
            check_decoding_budget(model, batch_size, longest, generate_kwargs)
            return batch_size
        except DecodingBudgetError:
            batch_size //= 2
    return batch_size


def decoding_workers(device: torch.device, batches: int, workers: int | None = None) -> int:
    """How many batches decode at once: `workers` if given, else two on a CPU with two or more of torch's threads
    and two or more batches, else one.

    A small model's decoding step on a CPU is many small operators and Python between them, which one thread per
    batch does nearly as fast as two; two batches at once, each on half of the threads, keep both cores busy
    while the other batch is in Python (more sentences a second, the same translations;
    docs/decisions/decoding-batches.md). GPUs run one batch at a time (one stream).

    Args:
        device: the device to decode on.
        batches: how many batches there are.
        workers: the caller's choice, or None.

    Returns:
        The number of batches to decode at once, at most `batches` (and at least 1).

    Raises:
        ValueError: `workers` below 1.
    """
    if workers is not None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}.")
        return min(workers, max(batches, 1))
    return 2 if device.type == "cpu" and torch.get_num_threads() >= 2 and batches >= 2 else 1


@contextmanager
def intra_op_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to `count` in this thread, and set back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def workers_within_budget(
    model: PreTrainedModel,
    first_batch: list[list[int]],
    generate_kwargs: dict[str, Any],
    workers: int,
    chosen: bool,
) -> int:
    """`workers`, or one where that many batches at once would not fit in memory and the count was not `chosen`;
    refused (DecodingBudgetError) when not even one fits. The first batch holds the longest sources, so a budget
    it breaks is found before any decoding.

    Args:
        model: the model, on its device.
        first_batch: the token ids of the first batch's sources.
        generate_kwargs: `generate()`'s options of the call.
        workers: the batches to decode at once.
        chosen: whether the caller chose `workers` (then it is not lowered).

    Returns:
        The batches to decode at once.

    Raises:
        DecodingBudgetError: not even one batch fits, or the chosen count does not.
    """
    budget = (model, len(first_batch), max(len(ids) for ids in first_batch), generate_kwargs)
    try:
        check_decoding_budget(*budget, in_flight=workers)
    except DecodingBudgetError:
        if chosen or workers == 1:
            raise
        check_decoding_budget(*budget)
        return 1
    return workers


class StopWhen(StoppingCriteria):
    """generate() stops every sequence at its next step once `condition()` is true: an event set (`translate`'s
    workers), every request of a server's batch gone (`serving.batcher`). It answers every row alike, so the
    search still lets final sentences leave the batch."""

    def __init__(self, condition: Callable[[], bool]) -> None:
        self.condition = condition

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.condition(), dtype=torch.bool, device=input_ids.device)


def decoded_batches(
    batches: list[list[int]], decode: Callable[[list[int], threading.Event | None], list[str]], workers: int
) -> Iterator[tuple[list[int], list[str]]]:
    """Each batch with its translations as they finish: one at a time in this thread (`decode(batch, None)`), or
    `workers` at once in threads of their own, each on its share of torch's threads (`decode(batch, stop)`, whose
    decoding ends at its next step once `stop` is set).

    `stop` is set by the first error in a worker and whenever this generator ends early, by an error or by Ctrl-C
    in this thread: batches not started are skipped, those under way end at their next step and are never handed
    on, so that a KeyboardInterrupt ends translation at once instead of after every batch under way.

    Args:
        batches: the batches, as lists of sentence indices.
        decode: a batch's translations, given the batch and the stop event (None in this thread).
        workers: batches decoded at once.

    Yields:
        Each batch with its translations, in the order they finish.
    """
    if workers == 1:
        for batch in batches:
            yield batch, decode(batch, None)
        return
    threads = max(1, torch.get_num_threads() // workers)
    stop = threading.Event()

    def decode_in_worker(batch: list[int]) -> list[str] | None:
        if stop.is_set():
            return None
        try:
            with intra_op_threads(threads):
                translations = decode(batch, stop)
        except BaseException:
            stop.set()
            raise
        return None if stop.is_set() else translations  # a batch the stop may have cut short is not handed on

    pool = ThreadPoolExecutor(workers, thread_name_prefix="translate")
    try:
        futures = {pool.submit(decode_in_worker, batch): batch for batch in batches}
        for future in as_completed(futures):
            if (translations := future.result()) is not None:
                yield futures[future], translations
    finally:
        stop.set()
        pool.shutdown(cancel_futures=True)


@overload
def translate(
    texts: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, **kwargs: Any
) -> str: ...
@overload
def translate(
    texts: Sequence[str], model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, **kwargs: Any
) -> list[str]: ...
@torch.no_grad()  # not inference_mode: see `decode` below
def translate(
    texts: str | Sequence[str],
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    *,
    batch_size: int | None = None,
    show_progress: bool = False,
    dtype: torch.dtype | None = None,
    workers: int | None = None,
    on_batch: Callable[[int], object] | None = None,
    cuda_graphs: bool = False,
    split_sentences: bool | str = False,
    **generate_kwargs: Any,
) -> str | list[str]:
    """Translate `texts` and return the translations in input order (one string for one string).

    Blank sources (nothing but whitespace) give empty translations. Decoding uses the model's generation config (for
    this package: beam 4, GNMT length penalty α = 0.6 or the α a training run saved, output limit = source length +
    50, §6.1) unless `generate_kwargs` override it. Sources longer than the model's position table are cut to it
    (`cap_source_lengths`, with a warning).

    Args:
        texts: one text, or a sequence of them.
        model: the translation model (this package's, or any seq2seq model with `generate()`).
        tokenizer: its tokenizer.
        batch_size: sentences a batch; default `BATCH_SIZE`, or fewer where a batch of the longest sources would not
            fit in memory (`batch_size_within_budget`). A batch that would not fit is refused before it decodes
            (`check_decoding_budget`).
        show_progress: show a progress bar over the batches.
        dtype: the precision decoding computes in; default `precision.decoding_precision`'s: bfloat16 autocast for
            float32 weights on a CPU or GPU that computes bfloat16 faster at this model's width (its d_model), else
            the weights' dtype. `torch.float32` keeps float32 weights in float32.
        workers: batches decoded at once (`decoded_batches`); default `decoding_workers`: two on a multi-core CPU,
            one when two would not fit in memory.
        on_batch: called with each decoded batch's sentence count as it finishes (a caller's own progress:
            `vaswani-translate` counts lines over many calls).
        cuda_graphs: decode one batch at a time through a compiled step over a static cache, each batch padded up to
            a few shapes (`cuda_graphs.bucketed_generate`): CUDA graphs on a GPU, the same translations.
        split_sentences: True (by the source language the model's folder records) or a language code: translate each
            text sentence by sentence and join the translations with the text's own spacing, as `vaswani-serve` and
            `vaswani-translate --split_sentences` do (sentences.py, sentencex).
        **generate_kwargs: `generate()`'s options, overriding the model's generation config (`num_beams=1`,
            `max_new_tokens=...`).

    Returns:
        The translation of `texts` (a string), or their translations in input order (a list); with
        `num_return_sequences=n` above 1, each text's n best translations instead, best first (a blank text's: n
        empty ones).

    Raises:
        ValueError: a count below one or a negative length in `generate_kwargs`, or `num_return_sequences` above 1
            with `split_sentences`.
        DecodingBudgetError: a batch that would not fit in the device's free memory.
    """
    options = dict(batch_size=batch_size, show_progress=show_progress, dtype=dtype, workers=workers)
    options.update(on_batch=on_batch, cuda_graphs=cuda_graphs, **generate_kwargs)
    if isinstance(texts, str):
        return translate([texts], model, tokenizer, split_sentences=split_sentences, **options)[0]
    returned = generate_kwargs.get("num_return_sequences") or 1
    if split_sentences and returned > 1:
        raise ValueError("split_sentences gives one translation per text: leave num_return_sequences at 1.")
    if split_sentences:
        language = splitting_language(split_sentences, model.name_or_path)
        return translate_by_sentences(
            texts, language, lambda sentences: translate(sentences, model, tokenizer, **options)
        )
    check_generate_arguments(generate_kwargs)
    if cuda_graphs:
        check_cuda_graphs(model, generate_kwargs, workers)
    results: list = [""] * len(texts) if returned == 1 else [[""] * returned for _ in texts]
    # verbose=False: cap_source_lengths says what is cut, in place of the tokenizer's "indexing errors" warning
    encoded = tokenizer(list(texts), add_special_tokens=True, verbose=False)["input_ids"] if texts else []
    sources = [index for index, ids in enumerate(encoded) if has_words(ids, tokenizer)]
    if not sources:
        return results
    encodings = cap_source_lengths([encoded[i] for i in sources], model.config.max_position_embeddings)
    if batch_size is None:
        batch_size = batch_size_within_budget(model, encodings, generate_kwargs)
    batches = length_sorted_batches([len(ids) for ids in encodings], batch_size)
    first_batch = [encodings[i] for i in batches[0]]
    count = 1 if cuda_graphs else decoding_workers(model.device, len(batches), workers)
    count = workers_within_budget(model, first_batch, generate_kwargs, count, chosen=workers is not None)
    precision = decoding_precision(model.dtype, model.device, dtype, width=model.config.d_model)

    def decode(batch: list[int], stop: threading.Event | None) -> list[str]:
        """One batch's translations, ending at the next step once `stop` is set (autocast and grad mode are per
        thread, so entered here)."""
        inputs = tokenizer.pad({"input_ids": [encodings[i] for i in batch]}, return_tensors="pt")
        rows = bucket(len(batch)) if cuda_graphs else len(batch)  # copies fill a CUDA-graph batch's bucket
        check_decoding_budget(model, rows, inputs["input_ids"].shape[1], generate_kwargs, count)
        arguments = generate_kwargs
        if stop is not None:
            criteria = StoppingCriteriaList(
                [*(generate_kwargs.get("stopping_criteria") or ()), StopWhen(stop.is_set)]
            )
            arguments = {**generate_kwargs, "stopping_criteria": criteria}
        # no_grad, not inference_mode: autocast keeps its bfloat16 copy of each weight for the whole generate()
        # only outside inference mode (inside it, every weight is cast again at every decoding step)
        with torch.no_grad(), autocast_to(precision, model.dtype, model.device):
            generate = partial(bucketed_generate, model) if cuda_graphs else model.generate
            outputs = generate(**inputs.to(model.device), **arguments)
        decoded = [text.strip() for text in tokenizer.batch_decode(outputs, skip_special_tokens=True)]
        if returned == 1:
            return decoded
        return [decoded[start : start + returned] for start in range(0, len(decoded), returned)]

    was_training = model.training
    model.eval()
    try:
        with tqdm(
            total=len(batches), desc="translating", unit="batch", disable=not show_progress
        ) as progress:
            for batch, translations in decoded_batches(batches, decode, count):
                for index, text in zip(batch, translations, strict=True):
                    results[sources[index]] = text
                progress.update()
                if on_batch is not None:
                    on_batch(len(batch))
    finally:
        model.train(was_training)
    return results
