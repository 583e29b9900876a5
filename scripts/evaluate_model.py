"""Alias of the `vaswani-evaluate` command for a checkout: see `python scripts/evaluate_model.py --help`."""

import sys

from vaswani_transformer_commands import evaluate as main

if __name__ == "__main__":
    sys.exit(main())
