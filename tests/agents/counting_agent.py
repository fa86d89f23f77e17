"""A fake agent CLI that records each run in the file named by its first argument."""

import sys

with open(sys.argv[1], "a", encoding="utf-8") as handle:
    handle.write("run\n")
print("did the task")
