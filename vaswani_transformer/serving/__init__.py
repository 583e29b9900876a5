"""`vaswani-serve`: a model behind HTTP, with LibreTranslate's API and a native one, decoding in a process of its
own, in-flight batching, limits, metrics and a graceful end (docs/serving.md).

The HTTP process: `app` (the routes, `create_app`), `libretranslate` (LibreTranslate's routes), `page` (the web page),
`parsing` (request bodies), `limits` (limits, API keys and rates), `languages` (language detection), `html` (HTML
texts' text nodes), `metrics` (Prometheus), `server` (uvicorn and the signals) and `decoder` (its handle on the
decoding process). The decoding process: `decoding_process` (its life), `batcher` (the requests' sentences decoded
together: in flight, or a batch at a time) and `scores` (per-sentence scores). Between them: `messages`. Sentences
are split by `decoding.sentences`, shared with `vaswani-translate --split_sentences` and `translate(...,
split_sentences=True)`.
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
