"""Alias of the `vaswani-export-ctranslate2` command for a checkout: see `python scripts/export_ctranslate2.py --help`."""

from vaswani_transformer.cli.command import export as main

if __name__ == "__main__":
    raise SystemExit(main())
