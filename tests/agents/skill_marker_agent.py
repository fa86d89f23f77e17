"""A fake agent CLI whose work depends on the skill's text (for `evaluate` tests).

Usage: skill_marker_agent.py COUNTER SKILL_DIR WORKDIR. It appends one line to COUNTER
(so a test counts rollouts), then writes WORKDIR/result.txt: `PASS` when the installed
SKILL.md holds the marker the scripted editor writes (tests/compile_world.py MARK), else
`FAIL`. So S_final (edited) passes the verifier and S_fast does not.
"""

import sys
from pathlib import Path

counter, skill_dir, workdir = sys.argv[1:4]
with open(counter, "a", encoding="utf-8") as handle:
    handle.write("run\n")
skill = (Path(skill_dir) / "SKILL.md").read_text(encoding="utf-8")
(Path(workdir) / "result.txt").write_text("PASS" if "IMPROVED" in skill else "FAIL", encoding="utf-8")
print("wrote result.txt")
