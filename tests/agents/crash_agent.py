"""A fake agent CLI for the crash suite (tests/test_crash_suite.py): about a second of work, logged.

Usage: crash_agent.py LOG SKILL_DIR. Rollouts take turns (a lock next to LOG) so a kill
can fall between two of them; each appends `start <sha>` and `end <sha>` to LOG, where
<sha> names the installed SKILL.md, so a test counts the rollouts of each skill version.
Its output depends on nothing else (no pid, path or time): the judge's prompts, which
quote it, stay the same from run to run.
"""

import fcntl
import hashlib
import sys
import time
from pathlib import Path

log, skill_dir = sys.argv[1:3]
sha = hashlib.sha256((Path(skill_dir) / "SKILL.md").read_bytes()).hexdigest()[:12]
with open(log + ".lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"start {sha}\n")
    time.sleep(0.8)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"end {sha}\n")
print("did the task: shipped the parser")
