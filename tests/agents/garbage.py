"""A fake agent whose stdout is mostly not stream-json: 3 bad lines, 1 good one."""

import json

print("Welcome to agent 0.1!")
print(json.dumps({"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "hi"}]}}))
print("{not json")
print("progress: 100%")
