"""Alias of the `vaswani-average` command for a checkout: see `python scripts/average_checkpoints.py --help`."""

from vaswani_transformer.cli.command import average as main

if __name__ == "__main__":
    raise SystemExit(main())
