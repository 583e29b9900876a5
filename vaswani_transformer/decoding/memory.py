"""How much memory this process may still take on the host: the least of what the machine has free, what the
process's own limits leave (`ulimit -v`, `ulimit -d`) and what its cgroup's limit leaves (a container's, a
systemd unit's, a batch job's). Reading only the machine's free memory, a decoding budget passed under a limit and
the batch then failed with an allocation error.

Linux only (the files under /proc and /sys/fs/cgroup); elsewhere every source is None.
"""

import os
from dataclasses import dataclass
from pathlib import Path

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Room:
    """`bytes` the process may still take, and the limit that leaves that much ("" for the machine's free
    memory; otherwise a phrase that follows "free": " under the process's address-space limit (ulimit -v)")."""

    bytes: int
    limit: str = ""


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _fields(path: Path) -> dict[str, str]:
    """ "Name: value" lines (/proc/meminfo, /proc/self/status) as a dict; empty when unreadable."""
    text = _read(path) or ""
    return {
        name.strip(): value.strip() for name, _, value in (line.partition(":") for line in text.splitlines())
    }


def _kib(value: str | None) -> int | None:
    """A "1234 kB" field in bytes."""
    try:
        return int(value.split()[0]) * 1024 if value else None
    except ValueError:
        return None


def machine_room(proc: Path = PROC) -> Room | None:
    """The machine's MemAvailable."""
    available = _kib(_fields(proc / "meminfo").get("MemAvailable"))
    return None if available is None else Room(available)


def rlimit_rooms(proc: Path = PROC) -> list[Room]:
    """What the soft address-space and data limits (RLIMIT_AS: `ulimit -v`; RLIMIT_DATA: `ulimit -d`) leave
    beyond what the process already uses of each (VmSize, VmData)."""
    if resource is None:
        return []
    status = _fields(proc / "self" / "status")
    rooms = []
    for limit, used, name in (
        (resource.RLIMIT_AS, "VmSize", "address-space limit (ulimit -v"),
        (resource.RLIMIT_DATA, "VmData", "data-segment limit (ulimit -d"),
    ):
        soft = resource.getrlimit(limit)[0]
        usage = _kib(status.get(used))
        if soft != resource.RLIM_INFINITY and usage is not None:
            rooms.append(Room(max(soft - usage, 0), f" under the process's {name} {soft / 2**30:,.1f} GiB)"))
    return rooms


def _cgroup_paths(proc: Path) -> tuple[str | None, str | None]:
    """This process's cgroup v2 path and its v1 memory controller's path, from /proc/self/cgroup."""
    unified = memory = None
    for line in (_read(proc / "self" / "cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:
            unified = path
        elif "memory" in controllers.split(","):
            memory = path
    return unified, memory


def _bytes_in(path: Path) -> int | None:
    text = _read(path)
    return int(text) if text is not None and text.isdigit() else None  # "max" (no limit) is None


def _room_in(folder: Path, limit_file: str, usage_file: str, root: Path) -> Room | None:
    """The least room any cgroup from `folder` up to `root` leaves: its limit less its usage."""
    rooms = []
    while True:
        limit, usage = _bytes_in(folder / limit_file), _bytes_in(folder / usage_file)
        if limit is not None and usage is not None:
            rooms.append(
                Room(max(limit - usage, 0), f" under the cgroup's memory limit ({folder / limit_file})")
            )
        if folder == root or folder.parent == folder:
            break
        folder = folder.parent
    return min(rooms, key=lambda room: room.bytes, default=None)


def cgroup_room(proc: Path = PROC, root: Path = CGROUP_ROOT) -> Room | None:
    """What the process's cgroup limits leave: cgroup v2's memory.max less memory.current, or v1's
    memory.limit_in_bytes less memory.usage_in_bytes, the least over the cgroup and its parents. Inside a
    container the process's path may not be under the mount (its own cgroup is the mount's root): then the root's
    files are read. A v1 limit of "no limit" is a huge number, never the least."""
    unified, memory = _cgroup_paths(proc)
    unified_mount = (
        root if (root / "cgroup.controllers").exists() else root / "unified"
    )  # v2 alone, or hybrid
    for path, mount, limit, usage in (
        (unified, unified_mount, "memory.max", "memory.current"),
        (memory, root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"),
    ):
        if path is None or not mount.is_dir():
            continue
        folder = mount / path.lstrip("/")
        room = _room_in(folder if folder.is_dir() else mount, limit, usage, mount)
        if room is not None:
            return room
    return None


def host_room(proc: Path = PROC, root: Path = CGROUP_ROOT) -> Room | None:
    """The least of the machine's free memory, the process's limits and its cgroup's; None when none can be read
    (not Linux)."""
    if os.name != "posix":
        return None
    rooms = [machine_room(proc), *rlimit_rooms(proc), cgroup_room(proc, root)]
    return min((room for room in rooms if room is not None), key=lambda room: room.bytes, default=None)
