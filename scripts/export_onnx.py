"""Alias of the `vaswani-export-onnx` command for a checkout: see `python scripts/export_onnx.py --help`."""

import sys

from vaswani_transformer_commands import export_onnx as main

if __name__ == "__main__":
    sys.exit(main())
