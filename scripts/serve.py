"""Alias of the `vaswani-serve` command for a checkout: see `python scripts/serve.py --help`."""

import sys

from vaswani_transformer.cli.serve import main

if __name__ == "__main__":
    sys.exit(main())
