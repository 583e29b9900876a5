"""Alias of the `vaswani-export-ctranslate2` command for a checkout: see `python scripts/export_ctranslate2.py --help`."""

import sys

from vaswani_transformer_commands import export as main

if __name__ == "__main__":
    sys.exit(main())
