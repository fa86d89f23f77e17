"""A fake agent that floods: `--mb N` megabytes on stdout and on stderr, then exits 0."""

import sys

megabytes = int(sys.argv[sys.argv.index("--mb") + 1]) if "--mb" in sys.argv else 20
line = b"x" * 1023 + b"\n"
for _ in range(megabytes * 1024):
    sys.stdout.buffer.write(line)
    sys.stderr.buffer.write(line)
sys.stdout.buffer.write(b"final answer\n")
