"""One writer at a time per output: an output folder or named result is claimed before any long work, and a
second writer of the same output stops, naming the first, instead of replacing its result when both finish.

A claim is an OS lock (flock) on `.NAME.lock` beside the output, which the kernel releases when its process ends
(a kill -9 leaves nothing held). The holder writes its PID and host into the file, for the second writer's
message, and removes the file when it is done, still holding it; a writer that locked a file so removed locks
the new one instead. Training holds its run folder the same way, with a lock file inside the folder
(`training.run_folder.holding_run_folder`); the caches take filelock's lock and wait (a second writer of a cache
entry reuses the first's).
"""

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .files.partials import remove_stale_partials
from .files.writing import write_failures_named


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
    `final` that died on this host (`files.remove_stale_partials`) are removed once the claim is held. A folder
    where no lock can be made (read-only, full) is a WriteError naming `final` and `choose`, the flag that picks
    another place."""
    final = Path(final)
    made = [folder for folder in (final.parent, *final.parent.parents) if not folder.exists()]
    lock = claim_path(final)
    descriptor = None
    try:
        with write_failures_named(final, choose):
            descriptor = _lock(lock, final, other or choose)
        remove_stale_partials(final.parent, final.name)
        yield
    finally:
        if descriptor is not None:
            lock.unlink(missing_ok=True)  # while still held: a waiting writer then locks a new file
            os.close(descriptor)
        for folder in made:  # deepest first
            try:
                folder.rmdir()
            except OSError:  # it holds the output now (or another writer's)
                break


def _lock(lock: Path, final: Path, choose: str) -> int:
    """An open descriptor of `lock`, locked by this process and still the file at that name, holding this
    process's PID and host."""
    while True:
        lock.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise OutputInUse(_in_use(lock, final, choose)) from None
        try:
            same = os.stat(lock).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:  # its holder removed it after this process opened it
            same = False
        if same:
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"PID {os.getpid()} on {socket.gethostname()}\n".encode())
            return descriptor
        os.close(descriptor)


def _in_use(lock: Path, final: Path, choose: str) -> str:
    try:
        holder = lock.read_text(encoding="utf-8").strip() or "another process"
    except OSError:
        holder = "another process"
    return (
        f"{final} is being written by another process ({holder}, which holds {lock}): wait for it to finish, "
        f"or choose another {choose}."
    )
