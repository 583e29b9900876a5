"""A model's CTranslate2 export as a decoding engine: `CTranslate2Translator` decodes an export folder
(`ctranslate2_export`) with its tokenizer, `CTranslate2Engine` wraps it in this package's keyword names.

CTranslate2's length penalty is |Y|^α, not the paper's GNMT ((5 + |Y|) / 6)^α, so beam search may choose
differently on close calls; greedy decoding gives the model's tokens.
"""

import os
from collections.abc import Callable, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from ..decoding.translate import BATCH_SIZE, length_sorted_batches
from ..decoding.translation_inputs import cap_source_lengths
from ..evaluation.loading import tokenizer_files
from ..files.reading import read_json
from ..trust import check_remote_code
from .ctranslate2_cuda import cublas_12_problem, library_error
from .ctranslate2_export import DECODING_FILE, EXPORT_AGAIN, import_ctranslate2

# This package's generate() keywords as CTranslate2's translate_batch options.
CTRANSLATE2_NAMES = {
    "num_beams": "beam_size",
    "length_penalty": "length_penalty",
    "max_new_tokens": "max_decoding_length",
    "num_return_sequences": "num_hypotheses",
}


def ctranslate2_options(overrides: dict[str, Any]) -> dict[str, Any]:
    """Decoding settings in CTranslate2's names: this package's (`CTRANSLATE2_NAMES`) renamed, its own kept."""
    return {CTRANSLATE2_NAMES.get(name, name): value for name, value in overrides.items()}


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
        ctranslate2 = import_ctranslate2()
        if device == "cuda" and (problem := cublas_12_problem(device)):  # opens the pip wheel's cuBLAS 12
            raise ValueError(problem)
        folder = Path(folder)
        check_remote_code(folder, trust_remote_code)
        if device == "cpu":
            options = {"intra_threads": 1, "inter_threads": cpu_count(), **options}
        self.decoding = read_json(folder / DECODING_FILE, EXPORT_AGAIN)
        if not isinstance(self.decoding, dict) or type(self.decoding.get("max_positions")) is not int:
            raise ValueError(
                f"{folder / DECODING_FILE} does not record the export's max_positions: {EXPORT_AGAIN}."
            )
        self.max_positions = self.decoding.pop("max_positions")
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

    @property
    def max_source_tokens(self) -> int:
        """The longest source whose translation fits the export's position rows: the source's own, less the
        output limit's offset (§6.1) and the decoder's start token where the output limit follows the source."""
        if "max_decoding_length" in self.decoding:
            return self.max_positions
        return max(1, self.max_positions - self.decoding["max_length_offset"] - 1)

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
        each sentence limited to its own source + the offset (§6.1), as the model's own search limits it, so a batch
        holds sources of one length unless the call sets a limit; all are queued at once, so that CTranslate2's
        `inter_threads` decode several in parallel."""
        if not texts:
            return []
        options = {**self.decoding, **ctranslate2_options(overrides)}
        offset, limit = options.pop("max_length_offset"), options.pop("max_decoding_length", None)
        returned = options.get("num_hypotheses", 1)
        encoded = self.tokenizer(list(texts), verbose=False)["input_ids"]
        sources = [
            self.tokenizer.convert_ids_to_tokens(ids)
            for ids in cap_source_lengths(encoded, self.max_source_tokens)
        ]
        lengths = [len(tokens) for tokens in sources]
        batches = length_sorted_batches(lengths, batch_size)
        if not limit:  # each sentence's own limit (§6.1: its source + 50): a batch of sources of one length
            batches = [list(run) for batch in batches for _, run in groupby(batch, key=lengths.__getitem__)]
        pending = [
            self.translator.translate_batch(
                [sources[i] for i in batch],
                max_decoding_length=min(
                    limit or max(len(sources[i]) for i in batch) + offset, self.max_positions - 1
                ),
                asynchronous=True,
                **options,
            )
            for batch in batches
        ]
        outputs: list[list[str]] = [[] for _ in sources]  # each source's hypotheses, one after the other
        progress = tqdm(total=len(batches), desc="translating", unit="batch", disable=not show_progress)
        with progress:
            for batch, results in zip(batches, pending, strict=True):
                for index, result in zip(batch, results, strict=True):
                    outputs[index] = result.result().hypotheses[:returned]
                progress.update()
                if on_batch is not None:
                    on_batch(len(batch))
        ids = [self.tokenizer.convert_tokens_to_ids(tokens) for found in outputs for tokens in found]
        texts = [text.strip() for text in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]
        if returned == 1:
            return texts
        return [texts[start : start + returned] for start in range(0, len(texts), returned)]


class CTranslate2Engine:
    """The model's CTranslate2 export (`CTranslate2Translator`), with this package's keyword names: a
    `decoding.engine.Engine`."""

    name = "ctranslate2"

    def __init__(self, translator: CTranslate2Translator, quantize: str = "none"):
        self.translator, self.quantize = translator, quantize
        self.tokenizer = translator.tokenizer
        self.max_source_tokens = translator.max_source_tokens

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
            settings["max_new_tokens"] = f"each source + {options['max_length_offset']}"
        return settings
