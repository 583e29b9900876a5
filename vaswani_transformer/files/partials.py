"""The temporary names writers write under (`.NAME.partial-HOST-PID`), and the removal of those that writers no
longer alive on this host left (a kill -9, a power cut)."""

import logging
import os
import re
import shutil
import socket
from pathlib import Path

# `partial_path`'s names: NAME, HOST, PID and a file's SUFFIX
PARTIAL_NAME = re.compile(r"\.?(?P<name>.+)\.partial-(?P<host>.+)-(?P<pid>\d+)(?P<suffix>\.[A-Za-z0-9]+)?")

logger = logging.getLogger(__name__)


def partial_path(final: Path, hidden: bool = True) -> Path:
    """The temporary name a writer of `final` writes under: `.NAME.partial-HOST-PID` (a file keeps its suffix,
    `.STEM.partial-HOST-PID.SUFFIX`, for writers that go by it), so that `remove_stale_partials` can tell the
    leftovers of processes that died on this host from those of live writers."""
    final = Path(final)
    dot, (stem, suffix) = (
        ("." if hidden else ""),
        ((final.stem, final.suffix) if final.suffix else (final.name, "")),
    )
    return final.with_name(f"{dot}{stem}.partial-{socket.gethostname()}-{os.getpid()}{suffix}")


def process_is_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        pass
    return True


def remove_stale_partials(folder: Path, final_name: str | None = None) -> None:
    """Remove what writers that are no longer alive left in `folder` under a temporary name (`partial_path`: a
    kill -9, a power cut), only those of `final_name` if given; those of live processes, or of another host
    (whose processes cannot be asked), are being written and stay."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        match = PARTIAL_NAME.fullmatch(path.name)
        if match is None or match["host"] != socket.gethostname():
            continue
        if final_name is not None and match["name"] + (match["suffix"] or "") != final_name:
            continue
        if not process_is_alive(int(match["pid"])):
            logger.info(f"removing {path}, left by a process that has ended")
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
