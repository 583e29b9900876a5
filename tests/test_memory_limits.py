"""The memory a process may take is the least of the machine's free memory, its own limits (`ulimit -v`,
`ulimit -d`) and its cgroup's (a container's): the decoding budget respects it, and an allocation that fails
anyway ends the command with one line naming the limit and the fix (vaswani_transformer/cli/command.py)."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.cli.command import command
from vaswani_transformer.decoding import memory as memory
from vaswani_transformer.decoding.translate import decoding_bytes

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
GiB = 2**30
pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the limits are read from Linux's /proc and /sys"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")


def fake_proc(tmp_path: Path, cgroup: str, available: int = 64 * GiB) -> Path:
    proc = tmp_path / "proc"
    write(proc / "meminfo", f"MemTotal:       99999999 kB\nMemAvailable:   {available // 1024} kB\n")
    write(proc / "self" / "cgroup", cgroup)
    return proc


def test_cgroup_v2_the_least_room_of_the_cgroup_and_its_parents(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "cpu memory")
    job = root / "batch.slice" / "job-7"
    write(job / "memory.max", str(4 * GiB))
    write(job / "memory.current", str(1 * GiB))  # 3 GiB left here
    write(job.parent / "memory.max", str(2 * GiB))
    write(job.parent / "memory.current", str(GiB + GiB // 2))  # but the slice leaves 0.5 GiB
    proc = fake_proc(tmp_path, "0::/batch.slice/job-7\n")
    room = memory.cgroup_room(proc, root)
    assert room == memory.Room(GiB // 2, f" under the cgroup's memory limit ({job.parent / 'memory.max'})")
    assert memory.host_room(proc, root).bytes <= room.bytes
    write(job.parent / "memory.max", "max")  # no limit on the slice: the job's own
    assert memory.cgroup_room(proc, root).bytes == 3 * GiB
    write(job / "memory.max", "max")
    assert memory.cgroup_room(proc, root) is None  # "max" everywhere: no cgroup limit


def test_cgroup_v1_and_a_container_whose_path_is_not_under_the_mount(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    write(root / "unified" / "cgroup.controllers", "")  # hybrid: v2 beside v1, no memory controller there
    mount = root / "memory"
    write(mount / "memory.limit_in_bytes", str(8 * GiB))
    write(mount / "memory.usage_in_bytes", str(6 * GiB))
    # the host's path of the container's cgroup, which is the mount's root inside it
    proc = fake_proc(tmp_path, "4:memory:/docker/3f2a\n0::/\n")
    room = memory.cgroup_room(proc, root)
    assert room == memory.Room(
        2 * GiB, f" under the cgroup's memory limit ({mount / 'memory.limit_in_bytes'})"
    )
    write(mount / "memory.limit_in_bytes", "9223372036854771712")  # v1's "no limit"
    assert memory.cgroup_room(proc, root).bytes > 1000 * GiB
    assert memory.host_room(proc, root).bytes <= 64 * GiB  # never the least


def test_the_machine_free_memory_when_nothing_limits_the_process(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "0::/\n", available=3 * GiB)
    root = tmp_path / "no-cgroup-mounted"
    assert memory.machine_room(proc) == memory.Room(3 * GiB)
    assert memory.cgroup_room(proc, root) is None
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert memory.host_room(proc, root) == memory.Room(3 * GiB)


def limit_address_space(limit: int) -> None:
    """The child's RLIMIT_AS, as `ulimit -v` sets it."""
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))


@pytest.mark.slow  # a command in a fresh interpreter
def test_the_decoding_budget_respects_the_address_space_limit(tmp_path: Path, letter_tokenizer) -> None:
    """Under `ulimit -v 3 GiB` on a machine with more free, a batch needing ~5 GiB passed the check and failed
    with a traceback from torch's allocator; now it is refused before it decodes, naming the limit."""
    config = tiny_config(vocab_size=30)
    VaswaniTransformerForConditionalGeneration(config).save_pretrained(tmp_path / "model")
    letter_tokenizer.save_pretrained(tmp_path / "model")
    beams = 5 * GiB // decoding_bytes(config, 1, 1, 4, 54)  # "a b c": 4 source tokens, up to 4 + 50 new
    machine = memory.machine_room()
    if machine is None or machine.bytes < 6 * GiB:
        pytest.skip("the machine has less than 6 GiB free: its free memory, not the limit, would refuse")
    completed = subprocess.run(
        [sys.executable, "-m", "vaswani_transformer", "translate", str(tmp_path / "model")]
        + ["--device", "cpu", "--num_beams", str(beams)],
        input="a b c\n",
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
        preexec_fn=lambda: limit_address_space(3 * GiB),
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    last = completed.stderr.strip().splitlines()[-1]
    assert "Traceback" not in completed.stderr and completed.stdout == ""
    assert "GiB are free under the process's address-space limit (ulimit -v 3.0 GiB)" in last
    assert last.endswith("lower --num_beams or --batch_size, or raise the limit.")


def test_an_allocation_that_fails_anyway_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    """torch's CPU allocator's refusal (a RuntimeError) and Python's MemoryError, wherever they come from."""

    @command
    def main(argv: list[str] | None = None) -> int:
        torch.empty(2**50, dtype=torch.uint8)  # a petabyte: no machine gives it
        return 0

    main.__wrapped__.__module__ = "vaswani_transformer.cli.translate"  # type: ignore[attr-defined]
    assert main([]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: out of memory (") and "GiB free" in error
    assert error.endswith(": lower --batch_size or --num_beams.") or error.endswith("or raise the limit.")

    @command
    def train(argv: list[str] | None = None) -> int:
        raise MemoryError

    train.__wrapped__.__module__ = "vaswani_transformer.cli.train"  # type: ignore[attr-defined]
    assert train([]) == 2
    assert "lower --max_tokens" in capsys.readouterr().err

    @command
    def other(argv: list[str] | None = None) -> int:
        raise RuntimeError("something else")

    with pytest.raises(RuntimeError, match="something else"):
        other([])
