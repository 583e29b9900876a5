"""How `vaswani-serve` serves a model (`ServeSettings`): plain settings, apart from the server's code, so that the
command's options and --help build without torch or the web framework."""

from dataclasses import dataclass, field
from typing import Any

from .limits import ServerLimits


@dataclass(frozen=True)
class ServeSettings:
    """How `vaswani-serve` serves a model: its language pair, decoding defaults, limits, batching and access."""

    source: str
    target: str
    limits: ServerLimits = ServerLimits()
    defaults: dict[str, Any] = field(default_factory=dict)  # the command line's decoding options
    max_batch_tokens: int = 4096
    max_batch_sentences: int = 128
    max_wait: float = 0.0
    decoding_workers: int | None = None  # searches or batches decoding at once; None: the policy's default
    api_keys: dict[str, float | None] | None = None
    requests_per_minute: float | None = None
    cors_origins: tuple[str, ...] = ()
