"""Alias of the `vaswani-average` command for a checkout: see `python scripts/average_checkpoints.py --help`."""

import sys

from vaswani_transformer_commands import average as main

if __name__ == "__main__":
    sys.exit(main())
