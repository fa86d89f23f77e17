"""A fake agent CLI for task-set `evaluate` tests: its result depends on the skill and the task.

Usage: task_marker_agent.py COUNTER SKILL_DIR WORKDIR PROMPT. It appends one line to COUNTER
(so a test counts rollouts) and writes WORKDIR/result.txt: on a task whose prompt names the
retro (the held-out task of tests/test_evaluate_tasks.py) the edited skill (with the
scripted editor's marker) FAILs and the original PASSes; on every other task the other way
round. It prints which skill it had, so a scripted judge can tell the packages' traces apart.
"""

import sys
from pathlib import Path

counter, skill_dir, workdir, prompt = sys.argv[1:5]
with open(counter, "a", encoding="utf-8") as handle:
    handle.write("run\n")
edited = "IMPROVED" in (Path(skill_dir) / "SKILL.md").read_text(encoding="utf-8")
passed = edited != ("retro" in prompt)
(Path(workdir) / "result.txt").write_text("PASS" if passed else "FAIL", encoding="utf-8")
print(f"skill: {'edited' if edited else 'plain'}; wrote result.txt")
