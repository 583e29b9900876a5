"""Alias of the `vaswani-plot-positional-encoding` command for a checkout: see `python scripts/plot_positional_encoding.py --help`."""

from vaswani_transformer.cli.command import plot_positional_encoding as main

if __name__ == "__main__":
    raise SystemExit(main())
