"""Pids a test agent wrote, as the host sees them.

A rollout may run in a PID namespace of its own (SPEC §9): an agent's os.getpid()
is then the namespace's number, so test agents write `pid... pid:[inode]` and tests map
each pid to the host's through /proc/<pid>/ns/pid and the NSpid line of /proc/<pid>/status.

A namespace's inode names it only while it lives: Linux hands a freed number to the next
namespace made (another test's rollout, on another worker), whose pid 3 may well be alive.
So a test that asks after a death writes each pid as `pid@start`, with its start time
(field 22 of /proc/<pid>/stat, clock ticks since boot, the same inside the namespace and out),
which tells the process apart from a newcomer in a namespace with a recycled number.
"""

from __future__ import annotations

import os
from pathlib import Path

from deep_pipeline.rollouts.guard import start_time


def read_pids(path: Path) -> tuple[list[str], str]:
    """The pids (`pid` or `pid@start`) in a file an agent wrote, and the PID namespace they are numbered in."""
    *pids, namespace = path.read_text().split()
    return pids, namespace


def host_pid(pid: str, namespace: str) -> int | None:
    """The host's pid of the live (non-zombie) process `pid` (`pid@start` pins its start) in `namespace`."""
    number, _, start = pid.partition("@")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") != namespace:
                continue
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["NSpid"].split()[-1]) == int(number) and not fields["State"].strip().startswith("Z"):
            if not start or start_time(int(name)) == int(start):
                return int(name)
    return None


def host_pids(path: Path) -> list[int]:
    """The host's pids of the processes a file names (run while they live: the dead have none)."""
    pids, namespace = read_pids(path)
    found = [host_pid(pid, namespace) for pid in pids]
    assert None not in found, f"{path.name}: not every process it names is alive"
    return found


def alive_in(pid: str, namespace: str) -> bool:
    """Whether `pid@start` still runs; asked after a death, so the start time is required."""
    assert "@" in pid, f"{pid}: a pid asked after its death needs its start time (pid@start)"
    return host_pid(pid, namespace) is not None

