"""Alias of the `vaswani-train` command for a checkout: see `python scripts/train.py --help`."""

import sys

from vaswani_transformer_commands import train as main

if __name__ == "__main__":
    sys.exit(main())
