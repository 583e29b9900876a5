"""Alias of the `vaswani-plot-attention` command for a checkout: see `python scripts/plot_attention.py --help`."""

import sys

from vaswani_transformer.cli.plot_attention import main

if __name__ == "__main__":
    sys.exit(main())
