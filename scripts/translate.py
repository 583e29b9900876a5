"""Alias of the `vaswani-translate` command for a checkout: see `python scripts/translate.py --help`."""

from vaswani_transformer.cli.command import translate as main

if __name__ == "__main__":
    raise SystemExit(main())
