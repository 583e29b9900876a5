"""Alias of the `vaswani-translate` command for a checkout: see `python scripts/translate.py --help`."""

import sys

from vaswani_transformer_commands import translate as main

if __name__ == "__main__":
    sys.exit(main())
