"""`python -m vaswani_transformer COMMAND [OPTIONS]`: the console command `vaswani-COMMAND` (also under `accelerate
launch -m vaswani_transformer train ...` and `torchrun -m ...`), through the same wrapper (`cli.command`)."""

import sys

from .cli.command import COMMANDS, run_command


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        given = f"unknown command {argv[0]!r}; " if argv and argv[0] not in ("-h", "--help") else ""
        stream = sys.stdout if not given and argv else sys.stderr
        print(
            f"usage: python -m vaswani_transformer COMMAND [OPTIONS]\n{given}COMMAND is one of: {', '.join(COMMANDS)}"
            " (`python -m vaswani_transformer COMMAND --help` for its options)",
            file=stream,
        )
        return 0 if stream is sys.stdout else 2
    return run_command(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
