"""Alias of the `vaswani-train` command for a checkout: see `python scripts/train.py --help`."""

from vaswani_transformer.cli.command import train as main

if __name__ == "__main__":
    raise SystemExit(main())
