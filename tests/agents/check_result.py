"""A verifier for `evaluate` tests: exit 0 when WORKDIR/result.txt says PASS."""

import sys
from pathlib import Path

result = Path(sys.argv[1]) / "result.txt"
text = result.read_text(encoding="utf-8").strip() if result.is_file() else "(no result.txt)"
if text != "PASS":
    print(f"result.txt says {text}", file=sys.stderr)
    sys.exit(1)
