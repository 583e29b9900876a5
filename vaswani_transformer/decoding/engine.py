"""`Engine`: what every decoding engine offers, whatever runs the model (`engines/`: PyTorch, ONNX Runtime,
CTranslate2).

The commands, the server, streaming (`evaluation.streaming`) and scoring (`evaluation.scoring`) take an engine
through this one interface: its name, its tokenizer, `translate` and the record of its decoding settings. It lives
below the engines and everything that uses them, so that each of those layers can name it, and imports no torch.
"""

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@runtime_checkable
class Engine(Protocol):
    """A decoding engine: `engines.TorchEngine`, `engines.OnnxRuntimeEngine` or `engines.CTranslate2Engine`, as
    `engines.load_engine` loads them. `isinstance(engine, Engine)` checks that it has these members.

    Attributes:
        name: the engine's `--engine` name ("torch", "onnxruntime", "ctranslate2").
        tokenizer: the model's tokenizer (the server counts a request's tokens with it).
        max_source_tokens: the longest source, in tokens, it translates whole (its position table); `translate`
            cuts a longer one with a warning, and the server refuses it.
    """

    name: str
    tokenizer: "PreTrainedTokenizerBase"
    max_source_tokens: int

    def translate(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        on_batch: Callable[[int], object] | None = None,
        **overrides: Any,
    ) -> list[str]:
        """Translations of `texts`, one per text in input order, decoded in length-sorted batches.

        Args:
            texts: the sources, none of them blank (`evaluation.streaming.translate_lines` keeps blank lines).
            batch_size: sentences per batch; None: the engine's default (`decoding.translate.BATCH_SIZE`, or what
                fits the memory).
            show_progress: a progress bar on standard error.
            on_batch: called with each decoded batch's sentence count.
            **overrides: decoding settings in `generate()`'s names (num_beams, length_penalty, max_new_tokens …);
                `num_return_sequences` n above 1 asks for each text's n best translations.

        Returns:
            One translation per text, in the order of `texts`; with `num_return_sequences` n above 1, each text's n
            best translations (a list), best first.
        """

    def decoding_settings(self, **overrides: Any) -> dict[str, Any]:
        """What `translate` uses with `overrides`, as scores.json records it.

        Returns:
            The engine, quantization, precision (dtype), search (num_beams, do_sample, length penalty, early
            stopping) and output limit (max_length or max_new_tokens).
        """
