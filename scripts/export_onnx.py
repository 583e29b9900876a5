"""Alias of the `vaswani-export-onnx` command for a checkout: see `python scripts/export_onnx.py --help`."""

import sys

from vaswani_transformer.cli.export_onnx import main

if __name__ == "__main__":
    sys.exit(main())
