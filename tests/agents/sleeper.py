"""A fake agent that works for `--seconds S` (default 2) without output, then answers."""

import sys
import time

seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 2.0
time.sleep(seconds)
print("finished after sleeping", flush=True)
