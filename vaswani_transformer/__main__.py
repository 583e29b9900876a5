"""`python -m vaswani_transformer COMMAND [OPTIONS]`: the console command `vaswani-COMMAND` (also under `accelerate
launch -m vaswani_transformer train ...` and `torchrun -m ...`), through the same wrapper (`cli.command`)."""

import argparse
import sys

from .cli.command import COMMANDS, run_command


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vaswani_transformer",
        epilog="`python -m vaswani_transformer COMMAND --help` for a command's options",
    )
    parser.add_argument("command", choices=COMMANDS, help="the console command vaswani-COMMAND")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="its options and arguments")
    args = parser.parse_args(argv)
    return run_command(args.command, args.arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
