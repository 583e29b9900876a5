"""The model: configuration, network, loss, decoding and translation pipeline — the remote-code tier.

Every saved model folder carries copies of these files, so that `trust_remote_code=True` loads it where this
package is not installed. They may import only torch, transformers, tqdm and each other (relative imports, one
folder); import-linter's contracts in pyproject.toml and tests/test_layout.py keep that rule
(docs/architecture.md).
"""
