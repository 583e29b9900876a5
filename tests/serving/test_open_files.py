"""`vaswani-serve` raises its soft limit on open files to the hard one before it listens: each connection holds a
file descriptor, and a soft limit of 1,024 is common where the hard one is far higher."""

import resource
import subprocess
import sys

from tests.serving.server_process import ENV

RAISE_AND_SHOW = (
    "import resource\n"
    "from vaswani_transformer.serving.server import open_files_to_the_hard_limit\n"
    "open_files_to_the_hard_limit()\n"
    "print(*resource.getrlimit(resource.RLIMIT_NOFILE))"
)


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096

    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))

    shown = subprocess.run(
        [sys.executable, "-c", RAISE_AND_SHOW],
        capture_output=True, text=True, env=ENV, preexec_fn=lowered, timeout=120, check=True,
    )  # fmt: skip
    assert shown.stdout.split() == [str(hard), str(hard)]
