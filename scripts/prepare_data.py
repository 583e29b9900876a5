"""Alias of the `vaswani-prepare` command for a checkout: see `python scripts/prepare_data.py --help`."""

import sys

from vaswani_transformer_commands import prepare as main

if __name__ == "__main__":
    sys.exit(main())
