"""A fake agent that prints one TraceStep-like JSON object per line (the `jsonl` format)."""

import json
import sys

prompt = sys.argv[1]
for step in (
    {"source": "user", "text": prompt},
    {"source": "agent", "text": "listing files", "tool_calls": [{"name": "bash", "arguments": "ls"}]},
    {"source": "tool", "text": "SKILL.md"},
    {"source": "agent", "text": "all done"},
):
    print(json.dumps(step))
