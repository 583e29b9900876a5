"""Alias of the `vaswani-push` command for a checkout: see `python scripts/push_to_hub.py --help`."""

import sys

from vaswani_transformer_commands import push as main

if __name__ == "__main__":
    sys.exit(main())
