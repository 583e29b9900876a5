"""`vaswani-serve`: a model behind HTTP, with LibreTranslate's API and a native one, dynamic batching, limits,
metrics and a graceful end (docs/serving.md).

- `app`: the routes (`create_app`, `ServeSettings`); `parsing`: request bodies; `limits`: limits, API keys and
  rates; `batcher`: the decoding worker that batches sentences of many requests; `scores`: per-sentence scores;
  `metrics`: Prometheus; `server`: uvicorn and the signals.
- Sentences are split by `decoding.sentences`, shared with `vaswani-translate
  --split_sentences` and `translate(..., split_sentences=True)`.
"""

from .app import ServeSettings, create_app
from .limits import ServerLimits, read_api_keys
from .server import run_server

__all__ = ["ServeSettings", "ServerLimits", "create_app", "read_api_keys", "run_server"]
