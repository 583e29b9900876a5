"""Alias of the `vaswani-plot-attention` command for a checkout: see `python scripts/plot_attention.py --help`."""

import sys

from vaswani_transformer_commands import plot_attention as main

if __name__ == "__main__":
    sys.exit(main())
