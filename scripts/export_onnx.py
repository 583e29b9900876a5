"""Alias of the `vaswani-export-onnx` command for a checkout: see `python scripts/export_onnx.py --help`."""

from vaswani_transformer.cli.command import export_onnx as main

if __name__ == "__main__":
    raise SystemExit(main())
