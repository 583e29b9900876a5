"""Alias of the `vaswani-plot-positional-encoding` command for a checkout: see `python scripts/plot_positional_encoding.py --help`."""

import sys

from vaswani_transformer.cli.plot_positional_encoding import main

if __name__ == "__main__":
    sys.exit(main())
