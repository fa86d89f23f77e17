"""A fake agent that fails: a line on stdout, an error on stderr, exit status 1."""

import sys

print('{"type": "system", "subtype": "init"}', flush=True)
print("fatal: could not reach the model", file=sys.stderr, flush=True)
sys.exit(1)
