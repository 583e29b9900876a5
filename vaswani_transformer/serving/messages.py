"""What the server (`decoder.Decoder`) and its decoding process (`decoding_process`) say to each other over their
pipe: plain, picklable records, no torch."""

from dataclasses import dataclass, field
from typing import Any

Options = tuple[tuple[str, Any], ...]  # decoding overrides, hashable: requests with equal ones share a batch


def options_of(overrides: dict[str, Any]) -> Options:
    """Decoding overrides in the hashable form requests with equal ones share a batch by."""
    return tuple(sorted(overrides.items()))


class QueueFull(Exception):
    """More sentences are waiting than the queue holds (`--max_queue`)."""


class SentenceTooLong(Exception):
    """A sentence longer than the engine translates whole (`Engine.max_source_tokens`): never cut silently."""

    def __init__(self, index: int, tokens: int, limit: int) -> None:
        super().__init__(f"sentence {index + 1} holds {tokens:,} tokens, more than {limit:,}")
        self.index, self.tokens, self.limit = index, tokens, limit


class DecodingFailed(Exception):
    """The decoding process could not translate a request (its error), or has ended."""


# The server to the decoding process
@dataclass(frozen=True)
class Translate:
    """Decode a request's sentences: `n_best` hypotheses each, each sentence's score where `want_scores`, and the
    decoding settings used where `want_settings`."""

    job: int
    sentences: list[str]
    options: Options
    want_scores: bool = False
    n_best: int = 1
    want_settings: bool = False


@dataclass(frozen=True)
class Abandon:
    """The request's client went away: its sentences leave the queue and the decoding."""

    job: int


@dataclass(frozen=True)
class Attention:
    """The encoder-decoder attention of `translation` given `source` (the page's heat-map)."""

    job: int
    source: str
    translation: str


@dataclass(frozen=True)
class Hurry:
    """The server is shutting down: decode what waits without waiting for company."""


@dataclass(frozen=True)
class Stop:
    """Decode what is left, then end."""


# The decoding process to the server
@dataclass(frozen=True)
class Ready:
    """The engine is loaded and has translated a warm-up sentence."""

    engine: str
    max_source_tokens: int
    attention: bool  # the page's heat-map can be drawn (the PyTorch model is there)
    policy: str  # how it batches: "in flight", or why a batch at a time
    workers: int


@dataclass(frozen=True)
class NotLoaded:
    """The engine did not load: the error, naming the file and the fix."""

    message: str


@dataclass(frozen=True)
class Translated:
    """A request's sentences, each with its hypotheses (best first) and score (None: not asked for)."""

    job: int
    hypotheses: list[list[str]]
    scores: list[float | None]
    settings: dict[str, Any] | None = None


@dataclass(frozen=True)
class Failed:
    """A request refused or failed: `kind` "too long" (sentence `index` holds `tokens`, more than `limit`),
    "queue full", "refused" (HTTP `status`, `message`) or "error" (`message`)."""

    job: int
    kind: str
    message: str = ""
    index: int = 0
    tokens: int = 0
    limit: int = 0
    status: int = 500


@dataclass(frozen=True)
class Maps:
    """The page's attention: tokens of both sides and `cross[layer][head][target][source]`."""

    job: int
    maps: dict[str, Any]


@dataclass
class Stats:
    """What decoded since the last report: sentences waiting now, each batch's (or in-flight step's) sentences,
    the sentences done, their source tokens and the seconds spent on them, and the sentences dropped."""

    waiting: int = 0
    batches: list[int] = field(default_factory=list)
    sentences: int = 0
    tokens: int = 0
    seconds: float = 0.0
    dropped: int = 0
