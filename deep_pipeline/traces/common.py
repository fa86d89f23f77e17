"""Shared pieces of the trace importers: building numbered steps, reading content blocks.

Every importer turns its format into the same shape (SPEC §3): steps numbered from 1
in order, sources `user|agent|tool|system`, a tool's result as its own `tool` step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from deep_pipeline.core.models import ErrorCategory, StepSource, ToolCall, TraceStep
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.jsonfile import decode_utf8, parse_json, read_bytes


REASONING = "agent_thought"  # the kind of an agent step that is the model's reasoning, not a message


@dataclass
class StepDraft:
    source: StepSource
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    kind: str = ""  # what produced it (e.g. "agent_thought"), so streamed chunks merge only with their own kind
    tool_call_id: str | None = None  # a tool step: the call it answers
    tool_name: str | None = None
    is_error: bool = False


class StepList:
    """Steps in the order they happened; numbered only when done, so merging stays simple."""

    def __init__(self) -> None:
        self.drafts: list[StepDraft] = []

    def add(self, source: StepSource, text: str = "", tool_calls: list[ToolCall] | None = None, kind: str = "",
            **answer: Any) -> StepDraft:
        """`answer`: a tool step's `tool_call_id`, `tool_name`, `is_error`."""
        draft = StepDraft(source=source, text=text, tool_calls=list(tool_calls or []), kind=kind or source, **answer)
        self.drafts.append(draft)
        return draft

    def add_chunk(self, source: StepSource, text: str, kind: str) -> None:
        """Streamed text: consecutive chunks of one kind are one step."""
        last = self.drafts[-1] if self.drafts else None
        if last is not None and last.kind == kind and not last.tool_calls:
            last.text += text
        else:
            self.add(source, text, kind=kind)

    def last(self) -> StepDraft | None:
        return self.drafts[-1] if self.drafts else None

    def call_name(self, call_id: str | None) -> str | None:
        """The tool named by the call `call_id`, so its result can say which tool answered."""
        if not call_id:
            return None
        for draft in reversed(self.drafts):
            for call in draft.tool_calls:
                if call.call_id == call_id:
                    return call.name
        return None

    def add_result(self, text: str, call_id: Any = None, *, is_error: bool = False) -> StepDraft:
        """A tool's result as its own step, naming the call it answers when the source says."""
        call_id = str(call_id) if isinstance(call_id, (str, int)) and str(call_id) else None
        return self.add("tool", text, tool_call_id=call_id, tool_name=self.call_name(call_id), is_error=is_error)

    def steps(self) -> list[TraceStep]:
        return [
            TraceStep(step=index, source=d.source, text=d.text, tool_calls=d.tool_calls, tool_call_id=d.tool_call_id,
                      tool_name=d.tool_name, is_error=d.is_error, reasoning=d.kind == REASONING)
            for index, d in enumerate(self.drafts, start=1)
        ]


def json_lines(text: str) -> list[str]:
    """The lines of a JSON-lines text. Only \n ends a record: str.splitlines would also
    break on U+2028 and friends, which JSON writers (Node's included) leave raw in strings."""
    return [line.rstrip("\r") for line in text.split("\n")]


def json_line_objects(
    text: str, path: Path | str, *, invalid: str, not_object: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The JSON object on each non-blank line, with its `file:line` label for later errors.

    A bad line is one error naming `file:line`: `invalid` (formatted with `column` and `msg`)
    for a line that is not JSON, `not_object` for JSON that is not an object. Each format
    keeps its own wording, which users and tests already match on. Lazy, so a caller that
    validates each object reports the first bad line, whichever way it is bad.
    """
    for number_, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        label = f"{path}:{number_}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{label}: " + invalid.format(column=exc.colno, msg=exc.msg)) from None
        if not isinstance(data, dict):
            raise InputError(f"{label}: {not_object}")
        yield label, data


def first_text(steps: list[TraceStep], source: StepSource) -> str:
    return next((s.text for s in steps if s.source == source and s.text.strip()), "")


def last_text(steps: list[TraceStep], source: StepSource) -> str:
    return next((s.text for s in reversed(steps) if s.source == source and s.text.strip()), "")


def arguments_text(value: Any) -> str:
    """Tool-call arguments as the agent gave them: JSON text for objects, strings as they are."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def block_text(block: Any) -> str:
    """The readable text of a content block in the shapes agents write.

    Handles plain strings, `{"type": "text", "text"}`, ACP's nested
    `{"type": "content", "content": {...}}`, ACP diffs, and lists of those.
    """
    if block is None:
        return ""
    if isinstance(block, str):
        return block
    if isinstance(block, list):
        return "\n".join(t for t in (block_text(b) for b in block) if t)
    if not isinstance(block, dict):
        return str(block)
    kind = block.get("type")
    if isinstance(block.get("text"), str):
        return block["text"]
    if kind == "content" or (kind is None and "content" in block):
        return block_text(block.get("content"))
    if kind == "diff":
        return f"[diff {block.get('path', '')}]\n{block.get('newText') or ''}"
    if kind == "image":
        return "[image]"
    if kind == "terminal":
        return f"[terminal {block.get('terminalId', '')}]"
    return ""


def read_text(path: Path) -> str:
    return decode_utf8(read_bytes(path), str(path))


def read_json(path: Path) -> Any:
    return parse_json(read_text(path), str(path))


def read_object(path: Path) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object at the top level")
    return data


def number(value: Any) -> float | None:
    """A numeric field of a result file, or None when absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def integer(value: Any) -> int | None:
    num = number(value)
    return int(num) if num is not None else None


def seconds_between(start: Any, end: Any) -> float | None:
    """Seconds between two ISO-8601 timestamps (Harbor, BenchFlow), or None."""
    try:
        begin = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        finish = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return round((finish - begin).total_seconds(), 3)


def category_from_text(text: str) -> ErrorCategory:
    """Best guess at SPEC §3's error category from an error's name or message."""
    lower = text.lower()
    if "idle" in lower and ("timeout" in lower or "timed out" in lower):
        return "idle_timeout"
    if "timeout" in lower or "timed out" in lower or "timeexceeded" in lower:
        return "timeout"
    if any(word in lower for word in ("ratelimit", "rate limit", "api", "authentication", "overloaded", "connection")):
        return "api_error"
    if any(word in lower for word in ("environment", "sandbox", "docker", "install", "setup", "build")):
        return "sandbox_setup"
    return "agent_error"
