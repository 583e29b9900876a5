"""Alias of the `vaswani-prepare` command for a checkout: see `python scripts/prepare_data.py --help`."""

from vaswani_transformer.cli.command import prepare as main

if __name__ == "__main__":
    raise SystemExit(main())
