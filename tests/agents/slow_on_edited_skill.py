"""A fake agent CLI: answers at once on the input SKILL.md, sleeps past any timeout on an edited one.

Usage: slow_on_edited_skill.py SKILL_DIR MARKER. An edit the scripted editor wrote holds MARKER.
"""

import sys
import time
from pathlib import Path

skill_dir, marker = sys.argv[1], sys.argv[2]
if marker in (Path(skill_dir) / "SKILL.md").read_text(encoding="utf-8"):
    time.sleep(30)
print("- shipped the parser", flush=True)
