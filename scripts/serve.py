"""Alias of the `vaswani-serve` command for a checkout: see `python scripts/serve.py --help`."""

import sys

from vaswani_transformer_commands import serve as main

if __name__ == "__main__":
    sys.exit(main())
