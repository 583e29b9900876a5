"""Alias of the `vaswani-evaluate` command for a checkout: see `python scripts/evaluate_model.py --help`."""

from vaswani_transformer.cli.command import evaluate as main

if __name__ == "__main__":
    raise SystemExit(main())
