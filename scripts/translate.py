"""Alias of the `vaswani-translate` command for a checkout: see `python scripts/translate.py --help`."""

import sys

from vaswani_transformer.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
