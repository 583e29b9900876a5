"""Alias of the `vaswani-convert` command for a checkout: see `python scripts/convert.py --help`."""

from vaswani_transformer.cli.command import convert as main

if __name__ == "__main__":
    raise SystemExit(main())
