"""What the server refuses, and whom: its limits (`ServerLimits`), API keys compared in constant time
(`ApiKeys`), per-key request rates (`RateLimiter`), both asked of every request that translates (`Access`), and
the JSON error every refusal is (`ApiError`)."""

import hmac
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request


class ApiError(Exception):
    """A refusal: the HTTP status, the message naming the problem and its fix, and any headers (Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class ServerLimits:
    """The limits `vaswani-serve` sets, each named by its flag in the refusals."""

    max_body_bytes: int = 1 << 20
    max_characters: int = 20_000
    max_sentences: int = 256
    max_queue: int = 2048
    request_timeout: float = 60.0
    max_beams: int = 16

    def check_text(self, texts: list[str], sentences: int) -> None:
        """413 when a request holds more characters or sentences than the server takes."""
        if (characters := sum(len(text) for text in texts)) > self.max_characters:
            raise ApiError(
                413,
                f"The request holds {characters:,} characters; this server takes at most {self.max_characters:,} "
                "per request (vaswani-serve --max_characters): send fewer.",
            )
        if sentences > self.max_sentences:
            raise ApiError(
                413,
                f"The request holds {sentences:,} sentences; this server takes at most {self.max_sentences:,} per "
                "request (vaswani-serve --max_sentences): send fewer.",
            )


def body_too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"The request body is larger than this server takes, {limit:,} bytes (vaswani-serve --max_body_bytes).",
    )


def read_api_keys(path: Path) -> dict[str, float | None]:
    """The keys of an --api_keys file: one a line, optionally followed by that key's requests per minute; blank
    lines and lines starting with # are skipped. A ValueError names a bad line, a key written twice or a
    byte-order mark."""
    keys: dict[str, float | None] = {}
    first_line: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    if text.startswith("\ufeff"):
        raise ValueError(
            f"{path} starts with a byte-order mark, which would become part of its first key: save it as UTF-8 "
            "without one."
        )
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0] in first_line:
            raise ValueError(
                f"{path}, line {number}: the key of line {first_line[fields[0]]} again; write each key once."
            )
        first_line[fields[0]] = number
        if len(fields) > 2:
            raise ValueError(
                f"{path}, line {number}: write a key, optionally followed by its requests per minute."
            )
        try:
            rate = float(fields[1]) if len(fields) == 2 else None
        except ValueError:
            rate = math.nan
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"{path}, line {number}: the requests per minute must be a positive number.")
        keys[fields[0]] = rate
    if not keys:
        raise ValueError(f"{path} holds no API key: write one a line.")
    return keys


class ApiKeys:
    """The keys a request must present, each with its own rate (None: the server's --requests_per_minute)."""

    def __init__(self, keys: dict[str, float | None]) -> None:
        self._keys = [(key.encode(), rate) for key, rate in keys.items()]

    def match(self, presented: str | None) -> tuple[str, float | None]:
        """The key presented and its rate, compared with every key in constant time; 403 for none or a wrong one."""
        if not presented:
            raise ApiError(
                403, "This server needs an API key: send api_key (or the header Authorization: Bearer KEY)."
            )
        found = None
        for key, rate in self._keys:  # no early exit: the time does not tell how many keys were tried
            if hmac.compare_digest(key, presented.encode()):
                found = (presented, rate)
        if found is None:
            raise ApiError(403, "Invalid API key.")
        return found


class RateLimiter:
    """Requests per minute per client (a key, or an address when there are no keys), as token buckets that refill
    continuously: a client over its rate gets 429 with the seconds to wait."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str, per_minute: float | None) -> None:
        if per_minute is None:
            return
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(client, (per_minute, now))
            tokens = min(per_minute, tokens + (now - then) * per_minute / 60)
            if tokens < 1:
                self._buckets[client] = (tokens, now)
                wait = math.ceil((1 - tokens) * 60 / per_minute)
                raise ApiError(
                    429,
                    f"Too many requests: at most {per_minute:g} a minute for this client. Retry in {wait} s.",
                    {"Retry-After": str(wait)},
                )
            self._buckets[client] = (tokens - 1, now)


class Access:
    """Who may translate: with keys, a request presents one (`api_key`, or `Authorization: Bearer KEY`) and keeps
    to its rate (or `requests_per_minute`); without, each client address keeps to `requests_per_minute`."""

    def __init__(self, keys: dict[str, float | None] | None, requests_per_minute: float | None) -> None:
        self.keys = ApiKeys(keys) if keys else None
        self.requests_per_minute = requests_per_minute
        self.limiter = RateLimiter()

    @property
    def key_required(self) -> bool:
        return self.keys is not None

    def admit(self, request: Request, presented: str | None) -> None:
        """403 without a valid key (when the server has keys), 429 over the client's rate."""
        header = request.headers.get("authorization", "")
        presented = presented or (header[7:].strip() if header.lower().startswith("bearer ") else None)
        if self.keys is not None:
            key, rate = self.keys.match(presented)
            self.limiter.check(f"key:{key}", rate or self.requests_per_minute)
        else:
            client = request.client.host if request.client else ""
            self.limiter.check(f"address:{client}", self.requests_per_minute)
