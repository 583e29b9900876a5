"""`vaswani-serve`: a model behind HTTP, with LibreTranslate's API and a native one, dynamic batching, limits,
metrics and a graceful end (docs/serving.md).

- `app`: the routes (`create_app`, `ServeSettings`); `parsing`: request bodies; `limits`: limits, API keys and
  rates; `batcher`: the decoding worker that batches sentences of many requests; `scores`: per-sentence scores;
  `metrics`: Prometheus; `server`: uvicorn and the signals.
- Sentences are split by `decoding.sentences`, shared with `vaswani-translate
  --split_sentences` and `translate(..., split_sentences=True)`.
"""

import lazy_loader

# Each name is imported from its module on first use (PEP 562), so that importing one module of the package
# does not import them all.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "app": ["create_app"],
        "settings": ["ServeSettings"],
        "limits": ["ServerLimits", "read_api_keys"],
        "server": ["run_server"],
    },
)
