"""Alias of the `vaswani-plot-attention` command for a checkout: see `python scripts/plot_attention.py --help`."""

from vaswani_transformer.cli.command import plot_attention as main

if __name__ == "__main__":
    raise SystemExit(main())
