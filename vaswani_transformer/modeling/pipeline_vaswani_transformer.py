"""The `vaswani-translation` pipeline: sentences in, `{"translation_text": ...}` out, decoded by the model's
`generate()` (§6.1 unless the call says otherwise).

transformers 5 has no `translation` pipeline. This one travels with every saved model as remote code (declared in
its config.json), so `pipeline("vaswani-translation", model=folder, trust_remote_code=True)` works where only torch
and transformers are installed; the package registers its subclass for the task (`register_auto_classes`)
(`vaswani_transformer.decoding.pipeline`), which adds CUDA graphs, language checks and the package's precision rule.
"""

import importlib
import types
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any

import torch
from transformers import Pipeline

from .configuration_vaswani_transformer import PIPELINE_TASK

# a sentence of a paragraph: (white space before it, its text, white space after it)
Piece = tuple[str, str, str]

# generate()'s counts that must be at least one, and lengths that must not be negative
AT_LEAST_ONE = ("num_beams", "num_return_sequences")
NOT_NEGATIVE = ("max_length", "max_new_tokens", "min_length", "min_new_tokens")


def check_generate_arguments(generate_kwargs: dict[str, Any]) -> None:
    """Refuse (ValueError, naming the argument) a count below one or a negative length, before any decoding:
    inside the search they fail far from the call (num_beams=0 divides by zero).

    Args:
        generate_kwargs: the keyword arguments meant for `generate()`.

    Raises:
        ValueError: `num_beams` or `num_return_sequences` below 1, or a negative length.
    """
    for name, lowest in [(name, 1) for name in AT_LEAST_ONE] + [(name, 0) for name in NOT_NEGATIVE]:
        value = generate_kwargs.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < lowest):
            raise ValueError(f"{name} must be a whole number of at least {lowest}, got {value!r}.")


def default_decoding_dtype(weights: torch.dtype, device: torch.device) -> torch.dtype:
    """What decoding computes in unless asked: bfloat16 (autocast) for float32 weights on a CUDA GPU that supports
    it, else the weights' own dtype (docs/decisions/automatic-bf16.md).

    Args:
        weights: the model's parameter dtype.
        device: where the model is.

    Returns:
        The dtype decoding computes in.
    """
    bf16_gpu = device.type == "cuda" and torch.cuda.is_bf16_supported()
    return torch.bfloat16 if weights == torch.float32 and bf16_gpu else weights


def sentence_pieces(text: str, segment: Callable[[str], Iterable[str]]) -> list[Piece]:
    """The sentences of `text`, as `segment` (sentencex's, for a language) cuts it, each with the white space
    around it, so that joining them gives `text` back exactly (docs/decisions/sentence-splitting.md). A blank text
    is one piece with no words; a splitter that dropped characters leaves the paragraph whole.

    Args:
        text: a paragraph.
        segment: the splitter, text in, pieces out.

    Returns:
        `(before, sentence, after)` for each sentence, in order.
    """
    pieces = [piece for piece in segment(text) if piece] if text.strip() else []
    if "".join(pieces) != text:
        pieces = [text]
    result = []
    for piece in pieces:
        stripped = piece.strip()
        start = piece.find(stripped) if stripped else len(piece)
        result.append((piece[:start], stripped, piece[start + len(stripped) :]))
    return result


def sentencex_segment(language: str) -> Callable[[str], Iterable[str]]:
    """sentencex's splitter for `language` (an ISO 639 code), or a ValueError saying how to install it."""
    try:
        sentencex = importlib.import_module("sentencex")
    except ImportError:
        raise ValueError("Splitting sentences needs sentencex: pip install sentencex.") from None
    return lambda text: sentencex.segment(language, text)


def as_pipeline_inputs(inputs: Any) -> Any:
    """`inputs` as transformers' pipelines take them: a string, a list, a generator or a torch Dataset (such as
    `KeyDataset`) as it is; any other sized iterable of strings (a datasets `Column`, a tuple) as a list; any
    other iterator as a generator, translated as it is read.

    Args:
        inputs: a sentence, or sentences in any iterable.

    Returns:
        The same sentences in a form transformers' `Pipeline.__call__` accepts.
    """
    if isinstance(inputs, str | bytes | list | Mapping | types.GeneratorType | torch.utils.data.Dataset):
        return inputs
    if isinstance(inputs, Sized) and isinstance(inputs, Iterable):
        return list(inputs)
    return (item for item in inputs) if isinstance(inputs, Iterable) else inputs


class VaswaniTranslationPipeline(Pipeline):
    """`pipeline("vaswani-translation", model=...)`: sentences in, `{"translation_text": ...}` out.

    Keyword arguments of the call (`num_beams=1`, `max_new_tokens=...`) override the model's generation config,
    which holds the paper's decoding (§6.1); `decoding_dtype=torch.bfloat16` decodes float32 weights under bfloat16
    autocast (`default_decoding_dtype` otherwise). Like transformers 4's translation pipeline, one sentence gives a
    list with one result; several give one result per sentence, or a list of them per sentence with
    `num_return_sequences=2`. A list gives a list; a generator or a dataset (`KeyDataset`) gives an iterator;
    `batch_size=` batches them. A blank sentence gives an empty translation. transformers 4's options work too:
    `return_tensors=True` (the token ids, as "translation_token_ids"), `return_text`,
    `clean_up_tokenization_spaces`, `truncation=True` (sources cut to the model's positions).
    `split_sentences=True` (by the source language the config's `langs` records, or a language code) translates
    each text sentence by sentence and joins the translations with the text's own spacing, as the package's
    `translate()` does (sentencex).
    """

    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(
        self,
        decoding_dtype: torch.dtype | None = None,
        return_text: bool | None = None,
        return_tensors: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        truncation: bool | None = None,
        **generate_kwargs: Any,
    ) -> tuple[dict, dict, dict]:
        check_generate_arguments(generate_kwargs)
        text = not return_tensors if return_text is None else return_text
        if not text and not return_tensors:
            raise ValueError(
                "return_text=False without return_tensors=True leaves nothing to return: ask for one."
            )
        postprocess: dict[str, Any] = {"return_text": text, "return_tensors": bool(return_tensors)}
        if clean_up_tokenization_spaces is not None:
            postprocess["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        forward = {
            **generate_kwargs,
            **({} if decoding_dtype is None else {"decoding_dtype": decoding_dtype}),
        }
        return ({} if truncation is None else {"truncation": truncation}), forward, postprocess

    def preprocess(self, text: str, truncation: bool = False) -> dict[str, torch.Tensor]:
        """One sentence's token ids and mask.

        Args:
            text: one sentence.
            truncation: cut it to the model's `max_position_embeddings` tokens.

        Returns:
            `{"input_ids", "attention_mask"}`, each `(1, src_len)`.

        Raises:
            TypeError: `text` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError(f"{PIPELINE_TASK} translates strings, got {type(text).__name__}.")
        limit = (
            {"truncation": True, "max_length": self.model.config.max_position_embeddings}
            if truncation
            else {}
        )
        encoding = self.tokenizer(text, return_tensors="pt", **limit)
        return {"input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"]}

    def generate(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **generate_kwargs: Any
    ) -> torch.Tensor:
        """The model's `generate()`; a subclass may decode otherwise (the package's: through CUDA graphs).

        Args:
            input_ids: `(batch, src_len)` source ids.
            attention_mask: `(batch, src_len)` source padding mask.
            **generate_kwargs: `generate()`'s options for this call.

        Returns:
            `(batch · num_return_sequences, out_len)` output ids.
        """
        return self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **generate_kwargs)

    def _forward(
        self,
        model_inputs: dict[str, torch.Tensor],
        decoding_dtype: torch.dtype | None = None,
        **generate_kwargs: Any,
    ) -> dict[str, torch.Tensor]:
        """generate() in `decoding_dtype` for the sentences with words; blank ones get only padding, which decodes
        to an empty translation."""
        input_ids, attention_mask = model_inputs["input_ids"], model_inputs["attention_mask"]
        with_words = attention_mask.sum(-1) > self.tokenizer.num_special_tokens_to_add()
        generation = self.model.generation_config
        returned = generate_kwargs.get("num_return_sequences") or generation.num_return_sequences or 1
        generated = torch.empty((0, returned, 1), dtype=torch.long)
        if with_words.any():
            weights, device = self.model.dtype, self.model.device
            dtype = decoding_dtype or self.decoding_dtype(weights, device)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype not in (weights, torch.float32)):
                output_ids = self.generate(
                    input_ids[with_words], attention_mask[with_words], **generate_kwargs
                )
            generated = output_ids.reshape(-1, returned, output_ids.shape[-1]).cpu()
        # (sentences, num_return_sequences, length): the pipeline splits a batch's outputs by sentence
        output_ids = torch.full((input_ids.shape[0], *generated.shape[1:]), self.model.config.pad_token_id)
        output_ids[with_words.cpu()] = generated
        return {"output_ids": output_ids}

    def decoding_dtype(self, weights: torch.dtype, device: torch.device) -> torch.dtype:
        """The precision of a call that names none (`default_decoding_dtype`).

        Args:
            weights: the model's parameter dtype.
            device: where the model is.

        Returns:
            The dtype decoding computes in.
        """
        return default_decoding_dtype(weights, device)

    def postprocess(
        self,
        model_outputs: dict[str, torch.Tensor],
        return_text: bool = True,
        return_tensors: bool = False,
        **decoding: Any,
    ) -> dict[str, Any] | list[dict[str, Any]]:
        """One sentence's translation, or the list of them when `num_return_sequences` asks for several: its text
        and (`return_tensors`) its token ids, as transformers 4's translation pipeline gave them.

        Args:
            model_outputs: `{"output_ids"}`, `(1, num_return_sequences, out_len)` for one sentence.
            return_text: include the text, as "translation_text".
            return_tensors: include the token ids, as "translation_token_ids".
            **decoding: the tokenizer's `decode()` options (`clean_up_tokenization_spaces`, ...).

        Returns:
            `{"translation_text": ...}`, or a list of them for several returned sequences.
        """
        results: list[dict[str, Any]] = []
        for ids in model_outputs["output_ids"][0]:
            result: dict[str, Any] = {"translation_token_ids": ids} if return_tensors else {}
            if return_text:
                result["translation_text"] = self.tokenizer.decode(
                    ids, skip_special_tokens=True, **decoding
                ).strip()
            results.append(result)
        return results if len(results) > 1 else results[0]

    def __call__(self, inputs: Any, **kwargs: Any) -> Any:
        """One sentence: the list of its translations (one unless `num_return_sequences`). Several (a list or
        tuple): a list with one result per sentence. A generator or a dataset: an iterator of them, translated as
        it is read. Nothing to translate: an empty list.

        Args:
            inputs: a sentence, a list or tuple of them, a generator or a dataset.
            **kwargs: `generate()`'s options for this call (`num_beams=1`, ...), `decoding_dtype`, `batch_size`,
                `truncation`, `return_text`, `return_tensors`, `split_sentences` (True: by the source language
                the config's `langs` records; or a language code).

        Returns:
            The translations, shaped as described above.
        """
        if split := kwargs.pop("split_sentences", False):
            return self._by_sentences(inputs, split, kwargs)
        inputs = as_pipeline_inputs(inputs)
        if isinstance(inputs, Sized) and not isinstance(inputs, str) and len(inputs) == 0:
            return []  # transformers' own call reads the first item to look for chat messages
        results = super().__call__(inputs, **kwargs)
        return [results] if isinstance(inputs, str) and isinstance(results, dict) else results

    def _by_sentences(self, inputs: Any, split: bool | str, kwargs: dict[str, Any]) -> list[dict[str, str]]:
        """`split_sentences`: every text's sentences translated in one call, each text's translations joined back
        with its own spacing; one result per text."""
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list | tuple) or not all(isinstance(text, str) for text in texts):
            raise ValueError("split_sentences translates a text or a list of texts.")
        if kwargs.get("num_return_sequences", 1) != 1 or kwargs.get("return_tensors"):
            raise ValueError(
                "split_sentences gives one translation text per input: leave out num_return_sequences."
            )
        language = split if isinstance(split, str) else (getattr(self.model.config, "langs", None) or [""])[0]
        if not language:
            raise ValueError("The model does not record its source language: name it, split_sentences='en'.")
        segment = sentencex_segment(language)
        paragraphs = [sentence_pieces(text, segment) for text in texts]
        sentences = [sentence for pieces in paragraphs for _, sentence, _ in pieces]
        translated = iter(super().__call__(sentences, **kwargs) if sentences else [])
        return [
            {
                "translation_text": "".join(
                    f"{before}{next(translated)['translation_text']}{after}" for before, _, after in pieces
                )
            }
            for pieces in paragraphs
        ]
