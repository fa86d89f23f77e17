"""A fake agent that hangs: starts a child that also sleeps, prints one line, never ends.

`--pidfile PATH` records its pid and its child's pid (tests check both are gone);
`--ignore-term` makes both ignore SIGTERM, so only SIGKILL stops them;
`--setsid-child` puts the child in a session of its own, out of the agent's group;
`--piddir DIR` writes one file per rollout in DIR holding the same two pids;
`--escape` makes the child a daemon that leaves its session and clears its environment
(setsid + an empty environment), out of reach of the group and the marker.

A rollout may run in a PID namespace of its own, where pids are the namespace's: after the
pids comes the namespace (`pid:[inode]`), which tests/pids.py maps to the host's pids; each
pid is written `pid@start` with its start time, since a dead namespace's number is reused.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

args = sys.argv[1:]
if "--ignore-term" in args:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child_code = "import signal, time\n"
if "--ignore-term" in args:
    child_code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
child_code += "time.sleep(3600)\n"
escape = "--escape" in args
child = subprocess.Popen([sys.executable, "-c", child_code], start_new_session="--setsid-child" in args or escape,
                         env={} if escape else None)
namespace = os.readlink("/proc/self/ns/pid")


def started(pid: int) -> str:
    # guard.start_time's field 22, read here: a fake agent stays a standalone script, importing nothing of ours.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return f"{pid}@{stat[stat.rfind(')') + 2:].split()[19]}"


pids = f"{started(child.pid)} {started(os.getpid())}"
if "--pidfile" in args:
    Path(args[args.index("--pidfile") + 1]).write_text(f"{pids} {namespace}\n")
if "--piddir" in args:
    temp = Path(args[args.index("--piddir") + 1]) / f"{os.getpid()}-{namespace[5:-1]}.tmp"
    temp.write_text(f"{pids} {namespace}\n")
    temp.rename(temp.with_suffix(""))  # a reader sees the file whole or not at all
print("working...", flush=True)
while True:
    time.sleep(3600)
