"""How long a first touch of the package takes: `import vaswani_transformer` and each command's `--help`, against
`import transformers` alone (the peer), each in a fresh interpreter, the commands and the peer taking turns so
that a change of load hits all alike. Prints the best of `--repeats` for each and its ratio to the peer's.

    python benchmarks/bench_startup.py --repeats 5
"""

import argparse
import subprocess
import sys
import time

from vaswani_transformer.cli.command import COMMANDS

PEER = "import transformers"
PACKAGE = "import vaswani_transformer"


def help_of(name: str) -> str:
    """Python that prints the command's --help as its console script would."""
    return (
        f"import sys; sys.argv = ['vaswani-{name}', '--help']\n"
        "from vaswani_transformer.cli.command import run_command\n"
        f"run_command({name!r})"
    )


def seconds(code: str) -> float:
    """Wall time of a fresh interpreter running `code` (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs = {PEER: PEER, PACKAGE: PACKAGE} | {f"vaswani-{name} --help": help_of(name) for name in COMMANDS}
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(args.repeats):
        for label, code in runs.items():
            best[label] = min(best[label], seconds(code))
    peer = best[PEER]
    width = max(map(len, runs))
    for label, value in best.items():
        print(f"{label:<{width}}  {value:6.2f} s  {value / peer:5.2f}x {PEER}")
    print(f"worst: {max(best.values()) / peer:.2f}x {PEER}")


if __name__ == "__main__":
    main()
