"""One writer at a time per output: an output folder or named result is claimed before any long work, and a
second writer of the same output stops, naming the first, instead of replacing its result when both finish.

A claim is filelock's OS lock (flock) on `.NAME.lock` beside the output, which the kernel releases when its
process ends (a kill -9 leaves nothing held). The holder writes its PID and host into the file as it takes it,
for the second writer's message, and removes the file when it is done, still holding it; a writer that locked a
file so removed tries the new one (filelock checks that the file it locked is still there). Training holds its
run folder with the same lock (`training.run_folder.holding_run_folder`); the caches wait for theirs (a second
writer of a cache entry reuses the first's).
"""

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from .files.partials import remove_stale_partials
from .files.writing import write_failures_named

# How long a second writer tries before it stops: long enough to try again the file of a holder that has just
# removed its lock, far shorter than any work a claim guards.
RETRY_SECONDS = 0.2


class OutputInUse(ValueError):
    """Another process is writing the same output: said with its PID and host, the lock and the fix."""


def claim_path(final: Path) -> Path:
    """The lock file that claims `final`: `.NAME.lock` beside it."""
    return final.with_name(f".{final.name}.lock")


@contextmanager
def claimed_output(final: str | Path, choose: str, *, other: str | None = None) -> Iterator[None]:
    """Hold `final` (a folder or file to be written) for this process while the block runs: OutputInUse, naming
    the holder and `other` (the flag that picks another output; default `choose`), when another process holds
    it. Folders made for the lock that hold nothing when the block ends are removed; leftovers of writers of
    `final` that died on this host (`files.partials.remove_stale_partials`) are removed once the claim is held. A
    folder where no lock can be made (read-only, full) is a WriteError naming `final` and `choose`, the flag that
    picks another place."""
    final = Path(final)
    made = [folder for folder in (final.parent, *final.parent.parents) if not folder.exists()]
    path = claim_path(final)
    lock = FileLock(path, timeout=RETRY_SECONDS, on_acquired=_write_holder)
    try:
        with write_failures_named(final, choose):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                lock.acquire()
            except Timeout:
                raise OutputInUse(_in_use(path, final, other or choose)) from None
        try:
            remove_stale_partials(final.parent, final.name)
            yield
        finally:
            path.unlink(missing_ok=True)  # while still held: a waiting writer then locks a new file
            lock.release()
    finally:
        for folder in made:  # deepest first
            try:
                folder.rmdir()
            except OSError:  # it holds the output now (or another writer's)
                break


def _write_holder(descriptor: int) -> None:
    """This process's PID and host, in the lock file it has just locked (filelock's `on_acquired`)."""
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"PID {os.getpid()} on {socket.gethostname()}\n".encode())


def _in_use(lock: Path, final: Path, choose: str) -> str:
    try:
        holder = lock.read_text(encoding="utf-8").strip() or "another process"
    except OSError:
        holder = "another process"
    return (
        f"{final} is being written by another process ({holder}, which holds {lock}): wait for it to finish, "
        f"or choose another {choose}."
    )
