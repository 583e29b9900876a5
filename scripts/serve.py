"""Alias of the `vaswani-serve` command for a checkout: see `python scripts/serve.py --help`."""

from vaswani_transformer.cli.command import serve as main

if __name__ == "__main__":
    raise SystemExit(main())
