"""A fake Claude Code: prints `--output-format stream-json` lines for a small session.

It really does what it reports: reads the installed skill from
`.claude/skills/*/SKILL.md` in its cwd, writes `answer.txt`, and echoes the prompt it
got (one argv entry) in its final result, so tests can check the runner's plumbing.
"""

import json
import sys
from pathlib import Path


def emit(event: dict) -> None:
    print(json.dumps(event), flush=True)


def main() -> int:
    prompt = sys.argv[sys.argv.index("-p") + 1]
    skills = sorted(Path(".claude/skills").glob("*/SKILL.md"))
    first_line = skills[0].read_text().splitlines()[0] if skills else "NO SKILL INSTALLED"
    emit({"type": "system", "subtype": "init", "session_id": "s1", "tools": ["Bash", "Write"]})
    emit({"type": "assistant", "message": {"id": "m1", "role": "assistant", "content": [
        {"type": "text", "text": "I will read the skill first."},
        {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "head -1 .claude/skills/*/SKILL.md"}},
    ]}})
    emit({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu1", "content": first_line},
    ]}})
    Path("answer.txt").write_text("42\n")
    emit({"type": "assistant", "message": {"id": "m2", "role": "assistant", "content": [
        {"type": "tool_use", "id": "tu2", "name": "Write", "input": {"file_path": "answer.txt", "content": "42\n"}},
    ]}})
    emit({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu2", "content": f"wrote {Path('answer.txt').resolve()}"},
    ]}})
    emit({"type": "assistant", "message": {"id": "m3", "role": "assistant", "content": [
        {"type": "text", "text": "Done: the answer is 42."},
    ]}})
    emit({"type": "result", "subtype": "success", "is_error": False, "result": f"answered: {prompt}",
          "total_cost_usd": 0.0123, "usage": {"input_tokens": 100, "output_tokens": 20}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
