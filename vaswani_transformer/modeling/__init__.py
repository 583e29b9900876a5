"""What every saved model folder carries: the configuration, the model (§3), the loss (§5.4), the decoding (§6.1),
the translation pipeline and Inference Endpoints' handler (`saving_vaswani_transformer.FOLDER_CODE`).

Copies of these files load a folder with `trust_remote_code=True` where this package is not installed, on
transformers' public APIs only. They import only torch, transformers and each other (import-linter's contracts in
pyproject.toml); the package's runtime around them lives in `vaswani_transformer.decoding` (docs/architecture.md).
"""
