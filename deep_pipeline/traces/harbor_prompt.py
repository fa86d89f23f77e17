"""The prompt of a Harbor trial whose agent log has no user turn.

Harbor runs Claude Code as `claude ... -p '<instruction>' ...`: the task's text is an
argument, so the stream never shows it. Harbor keeps each command it ran in
`agent/command-<n>/command.txt`; the prompt is the argument of `-p` (`--print`) there.
Failing that, result.json names the task's folder (`task_id.path`, `config.task.path`),
whose `instruction.md` is the task's text, when that folder is on this machine.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from deep_pipeline.errors import InputError
from deep_pipeline.traces.common import read_text

_PRINT_FLAGS = ("-p", "--print")


def prompt_of_command(command: str) -> str | None:
    """The `-p` argument of a `claude` command line, or None when it has none."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: not a command line we can read
        return None
    seen_claude = False
    for index, word in enumerate(words):
        seen_claude = seen_claude or Path(word).name == "claude"
        if seen_claude and word in _PRINT_FLAGS and index + 1 < len(words):
            argument = words[index + 1]
            if argument.strip() and not argument.startswith("-"):
                return argument
    return None


def _command_number(path: Path) -> int:
    digits = path.parent.name[len("command-"):]
    return int(digits) if digits.isdigit() else 1 << 30


def _from_commands(trial: Path) -> tuple[str, str] | None:
    for path in sorted((trial / "agent").glob("command-*/command.txt"), key=_command_number):
        try:
            prompt = prompt_of_command(read_text(path))
        except InputError:
            continue  # an unreadable command file is not the prompt; the next one may be
        if prompt is not None:
            return prompt, str(path.relative_to(trial))
    return None


def _task_paths(result: dict[str, Any]) -> list[str]:
    task_id = result.get("task_id")
    config = result.get("config")
    task = config.get("task") if isinstance(config, dict) else None
    found = [where.get("path") for where in (task_id, task) if isinstance(where, dict)]
    return [p for p in found if isinstance(p, str) and p]


def _from_task(result: dict[str, Any]) -> tuple[str, str] | None:
    for task in _task_paths(result):
        instruction = Path(task) / "instruction.md"
        try:
            if instruction.is_file():
                text = read_text(instruction).strip()
                if text:
                    return text, str(instruction)
        except (OSError, InputError):
            continue
    return None


def trial_prompt(trial: Path, result: dict[str, Any]) -> tuple[str, str] | None:
    """(prompt, where it came from) for a trial whose stream has no user turn, else None."""
    return _from_commands(trial) or _from_task(result)
