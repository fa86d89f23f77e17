"""Claude Code `--output-format stream-json` output -> trace steps.

One JSON object per line:
- `{"type": "system", ...}`: session set-up; not a step (it holds the tool list, not a message);
- `{"type": "assistant", "message": {"id", "content": [text | thinking | tool_use]}}`:
  agent steps; Claude Code writes one line per content block, so consecutive lines of
  one message id are merged into one step;
- `{"type": "user", "message": {"content": [tool_result ...] | "text"}}`: each
  `tool_result` is its own `tool` step, other content a `user` step;
- `{"type": "result", "result", "usage", "total_cost_usd", "is_error"}`: the final answer
  and the accounting.
Lines that are not JSON objects are counted in `bad_lines`; what that means (a crashed
agent, stderr mixed in) is for the caller to decide.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.models import ToolCall, TraceStep
from deep_pipeline.traces.common import StepList, arguments_text, block_text, integer, json_lines, last_text, number

log = logging.getLogger(__name__)


class ParsedStream(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: list[TraceStep] = Field(default_factory=list)
    final_output: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    is_error: bool = False
    bad_lines: int = 0
    saw_result: bool = False  # a stream cut off before its result line has none


def _add_tool_use(block: dict[str, Any], steps: StepList, same_message: bool) -> None:
    call = ToolCall(name=str(block.get("name", "")), arguments=arguments_text(block.get("input")),
                    call_id=block.get("id"))
    last = steps.last()
    if same_message and last is not None and last.kind == "agent":
        last.tool_calls.append(call)  # the text and the calls of one answer are one step
    else:
        steps.add("agent", "", [call], kind="agent")


def _add_text(text: str, kind: str, steps: StepList, same_message: bool) -> None:
    last = steps.last()
    if same_message and last is not None and last.kind == kind and not last.tool_calls:
        last.text += "\n\n" + text
    else:
        steps.add("agent", text, kind=kind)


def _assistant(event: dict[str, Any], steps: StepList, previous_id: str | None) -> str | None:
    """Add an assistant line's blocks; return its message id (Claude Code writes a line per block)."""
    message = event.get("message") or {}
    message_id = message.get("id")
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": block_text(content)}]
    for block in blocks:
        same_message = message_id is not None and message_id == previous_id
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            _add_tool_use(block, steps, same_message)
        elif kind == "text" and block.get("text"):
            _add_text(block["text"], "agent", steps, same_message)
        elif kind == "thinking" and block.get("thinking"):
            _add_text(block["thinking"], "agent_thought", steps, same_message)
        previous_id = message_id
    return message_id


def _user(event: dict[str, Any], steps: StepList) -> None:
    content = (event.get("message") or {}).get("content")
    if isinstance(content, str):
        steps.add("user", content)
        return
    texts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            steps.add("tool", block_text(block.get("content")))
        else:
            texts.append(block_text(block))
    if any(t.strip() for t in texts):
        steps.add("user", "\n".join(t for t in texts if t))


def _prompt_tokens(usage: dict[str, Any]) -> int | None:
    # Anthropic counts cached input apart; the prompt is all of it.
    parts = [integer(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def parse_claude_stream(text: str, *, origin: str) -> ParsedStream:
    """Parse Claude Code stream-json text; `origin` names the source in log messages."""
    steps = StepList()
    parsed = ParsedStream()
    message_id: str | None = None  # of the previous line, when it was an assistant line
    for line in json_lines(text):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            event = None
        if not isinstance(event, dict):
            parsed.bad_lines += 1
            continue
        kind = event.get("type")
        if kind == "assistant":
            message_id = _assistant(event, steps, message_id)
            continue
        message_id = None
        if kind == "user":
            _user(event, steps)
        elif kind == "result":
            usage = event.get("usage") or {}
            parsed.saw_result = True
            parsed.final_output = event.get("result") if isinstance(event.get("result"), str) else ""
            parsed.prompt_tokens = _prompt_tokens(usage)
            parsed.completion_tokens = integer(usage.get("output_tokens"))
            parsed.cost_usd = number(event.get("total_cost_usd"))
            parsed.is_error = bool(event.get("is_error")) or str(event.get("subtype", "")).startswith("error")
    if parsed.bad_lines:
        log.debug("%s: %d line(s) of the stream were not JSON objects", origin, parsed.bad_lines)
    parsed.steps = steps.steps()
    if not parsed.final_output:
        parsed.final_output = last_text(parsed.steps, "agent")
    return parsed
