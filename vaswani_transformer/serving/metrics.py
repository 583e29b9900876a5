"""The server's Prometheus metrics, in a registry of its own (nothing global): requests by endpoint and status,
their latency, the queue's depth, the sentences decoding together, and the sentences and source tokens decoded (per
second: their `rate()`, and the last report's). The decoding process reports what decoded (`decoder.Decoder`)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class ServerMetrics:
    """The metrics `GET /metrics` exposes; the decoding reports through `queued`, `batch`, `decoded` and `dropped`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter(
            "vaswani_requests", "HTTP requests answered", ["endpoint", "status"], registry=registry
        )
        self.latency = Histogram(
            "vaswani_request_seconds",
            "Time to answer",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue = Gauge("vaswani_queue_sentences", "Sentences waiting to decode", registry=registry)
        self.batches = Histogram(
            "vaswani_batch_sentences",
            "Sentences decoding together: per batch, or per step of the in-flight search",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.sentences = Counter("vaswani_sentences", "Sentences decoded", registry=registry)
        self.tokens = Counter("vaswani_source_tokens", "Source tokens decoded", registry=registry)
        self.dropped_sentences = Counter(
            "vaswani_dropped_sentences",
            "Sentences dropped, waiting or decoding: their client went away",
            registry=registry,
        )
        self.sentence_rate = Gauge(
            "vaswani_sentences_per_second",
            "Sentences per second of decoding, as last reported",
            registry=registry,
        )
        self.token_rate = Gauge(
            "vaswani_source_tokens_per_second",
            "Source tokens per second of decoding, as last reported",
            registry=registry,
        )

    def answered(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def queued(self, sentences: int) -> None:
        self.queue.set(sentences)

    def batch(self, sentences: int) -> None:
        self.batches.observe(sentences)

    def decoded(self, sentences: int, tokens: int, seconds: float) -> None:
        self.sentences.inc(sentences)
        self.tokens.inc(tokens)
        if seconds > 0:
            self.sentence_rate.set(sentences / seconds)
            self.token_rate.set(tokens / seconds)

    def dropped(self, sentences: int) -> None:
        self.dropped_sentences.inc(sentences)
