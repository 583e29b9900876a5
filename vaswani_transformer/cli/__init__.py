"""Command-line entry points: each module's `main()` backs a console script and a `scripts/*.py` alias."""
