"""A fake agent CLI (the `jsonl` format) that reads its skill or not, as its third argument says.

argv: prompt, skill_dir, `read` or `skip`. With `read` it cats SKILL.md and then repeats
the file's text in its answer (so it quotes whatever unit was edited); with `skip` it
only lists the working directory.
"""

import json
import sys
from pathlib import Path

prompt, skill_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
steps = [{"source": "user", "text": prompt}]
if mode == "read":
    skill = (skill_dir / "SKILL.md").read_text(encoding="utf-8")
    steps += [
        {"source": "agent", "text": "reading the skill",
         "tool_calls": [{"name": "bash", "arguments": json.dumps({"command": f"cat {skill_dir}/SKILL.md"})}]},
        {"source": "tool", "text": skill},
        {"source": "agent", "text": f"Following the skill:\n{skill}"},
    ]
else:
    steps += [
        {"source": "agent", "text": "listing files", "tool_calls": [{"name": "bash", "arguments": "ls"}]},
        {"source": "tool", "text": "notes.txt"},
    ]
steps.append({"source": "agent", "text": "- shipped the parser"})
for step in steps:
    print(json.dumps(step))
