"""Pids a test agent wrote, as the host sees them.

A rollout may run in a PID namespace of its own (SPEC §9): an agent's os.getpid()
is then the namespace's number, so test agents write `pid... pid:[inode]` and tests map
each pid to the host's through /proc/<pid>/ns/pid and the NSpid line of /proc/<pid>/status.
"""

from __future__ import annotations

import os
from pathlib import Path


def read_pids(path: Path) -> tuple[list[int], str]:
    """The pids in a file an agent wrote, and the PID namespace they are numbered in."""
    *pids, namespace = path.read_text().split()
    return [int(p) for p in pids], namespace


def host_pid(pid: int, namespace: str) -> int | None:
    """The host's pid of the live (non-zombie) process numbered `pid` in `namespace`, if any."""
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
        if int(fields["NSpid"].split()[-1]) == pid and not fields["State"].strip().startswith("Z"):
            return int(name)
    return None


def host_pids(path: Path) -> list[int]:
    """The host's pids of the processes a file names (run while they live: the dead have none)."""
    pids, namespace = read_pids(path)
    found = [host_pid(pid, namespace) for pid in pids]
    assert None not in found, f"{path.name}: not every process it names is alive"
    return found


def alive_in(pid: int, namespace: str) -> bool:
    return host_pid(pid, namespace) is not None
