"""Alias of the `vaswani-convert` command for a checkout: see `python scripts/convert.py --help`."""

import sys

from vaswani_transformer_commands import convert as main

if __name__ == "__main__":
    sys.exit(main())
