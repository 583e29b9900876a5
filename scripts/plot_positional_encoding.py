"""Alias of the `vaswani-plot-positional-encoding` command for a checkout: see `python scripts/plot_positional_encoding.py --help`."""

import sys

from vaswani_transformer_commands import plot_positional_encoding as main

if __name__ == "__main__":
    sys.exit(main())
