"""Alias of the `vaswani-push` command for a checkout: see `python scripts/push_to_hub.py --help`."""

from vaswani_transformer.cli.command import push as main

if __name__ == "__main__":
    raise SystemExit(main())
