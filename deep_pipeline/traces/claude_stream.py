"""Claude Code `--output-format stream-json` output -> trace steps.

One JSON object per line:
- `{"type": "system", ...}`: session set-up; not a step (it holds the tool list, not a message);
  the `init` line names the model (else the assistant messages do: `message.model`);
- `{"type": "assistant", "message": {"id", "content": [text | thinking | tool_use]}}`:
  agent steps; Claude Code writes one line per content block, so consecutive lines of
  one message id are merged into one step;
- `{"type": "user", "message": {"content": [tool_result ...] | "text"}}`: each
  `tool_result` is its own `tool` step naming the call it answers (`tool_use_id`, and the
  tool's name from the `tool_use` block with that id; parallel calls' results arrive in
  any order) and keeping `is_error`; other content is a `user` step;
- `{"type": "user", "isSynthetic": true, ...}`: text Claude Code wrote, not the user. Right
  after a `Skill` call it is that skill's text (SKILL.md) handed to the model: a `tool`
  step answering the Skill call, never the task prompt. Elsewhere (hook output, notices)
  it is a `system` step;
- `{"type": "result", "result", "usage", "total_cost_usd", "modelUsage", "is_error"}`: the
  final answer and the accounting.

Tokens and cost: `usage` counts the main model only, while `total_cost_usd` also pays for
sub-models (WebFetch, for one, reads pages with a small model). When the result has
`modelUsage` (per model: input, cache and output tokens, `costUSD`), it is kept per model
and the token totals are its sums, so tokens and cost cover the same calls. Without it the
tokens are `usage`'s, the main model's only.
Lines that are not JSON objects are counted in `bad_lines`; what that means (a crashed
agent, stderr mixed in) is for the caller to decide.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.models import ModelUsage, ToolCall, TraceStep
from deep_pipeline.traces.common import StepList, arguments_text, block_text, integer, json_lines, last_text, number

log = logging.getLogger(__name__)


class ParsedStream(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: list[TraceStep] = Field(default_factory=list)
    final_output: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    model_usage: dict[str, ModelUsage] = Field(default_factory=dict)
    is_error: bool = False
    bad_lines: int = 0
    saw_result: bool = False  # a stream cut off before its result line has none
    model: str | None = None  # from the init line, else the first assistant message


SKILL_TOOL = "Skill"


class _Calls:
    """The tool calls seen so far, so a result can name the call it answers."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.skill_waiting: str | None = None  # a Skill call whose text is not injected yet

    def called(self, call: ToolCall) -> None:
        if call.call_id:
            self.names[call.call_id] = call.name
            if call.name == SKILL_TOOL:
                self.skill_waiting = call.call_id


def _add_tool_use(block: dict[str, Any], steps: StepList, same_message: bool, calls: _Calls) -> None:
    call_id = block.get("id")
    call = ToolCall(name=str(block.get("name", "")), arguments=arguments_text(block.get("input")),
                    call_id=call_id if isinstance(call_id, str) else None)
    calls.called(call)
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


def _assistant(event: dict[str, Any], steps: StepList, previous_id: str | None, calls: _Calls) -> str | None:
    """Add an assistant line's blocks; return its message id (Claude Code writes a line per block)."""
    message = event.get("message") or {}
    message_id = message.get("id")
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": block_text(content)}]
    for block in blocks:
        same_message = message_id is not None and message_id == previous_id
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            _add_tool_use(block, steps, same_message, calls)
        elif kind == "text" and block.get("text"):
            _add_text(block["text"], "agent", steps, same_message)
        elif kind == "thinking" and block.get("thinking"):
            _add_text(block["thinking"], "agent_thought", steps, same_message)
        previous_id = message_id
    return message_id


def _tool_result(block: dict[str, Any], steps: StepList, calls: _Calls) -> None:
    call_id = block.get("tool_use_id")
    call_id = call_id if isinstance(call_id, str) else None
    failed = block.get("is_error") is True
    steps.add("tool", block_text(block.get("content")), tool_call_id=call_id,
              tool_name=calls.names.get(call_id) if call_id else None, is_error=failed)
    if failed and call_id is not None and call_id == calls.skill_waiting:
        calls.skill_waiting = None  # a Skill call that failed injects no text


def _synthetic(event: dict[str, Any]) -> bool:
    message = event.get("message") or {}
    return event.get("isSynthetic") is True or message.get("isSynthetic") is True


def _add_written_text(text: str, synthetic: bool, steps: StepList, calls: _Calls) -> None:
    if not synthetic:
        steps.add("user", text)
    elif calls.skill_waiting is not None:
        # The skill's text is what the Skill call gave the model: its output, not a user turn.
        steps.add("tool", text, tool_call_id=calls.skill_waiting, tool_name=SKILL_TOOL)
        calls.skill_waiting = None
    else:
        steps.add("system", text)


def _user(event: dict[str, Any], steps: StepList, calls: _Calls) -> None:
    content = (event.get("message") or {}).get("content")
    synthetic = _synthetic(event)
    if isinstance(content, str):
        _add_written_text(content, synthetic, steps, calls)
        return
    texts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            _tool_result(block, steps, calls)
        else:
            texts.append(block_text(block))
    if any(t.strip() for t in texts):
        _add_written_text("\n".join(t for t in texts if t), synthetic, steps, calls)


def _prompt_tokens(usage: dict[str, Any]) -> int | None:
    # Anthropic counts cached input apart; the prompt is all of it.
    return _total([integer(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")])


def _model_usage(value: Any) -> dict[str, ModelUsage]:
    """`modelUsage` per model; of the wrong shape it fails (AttributeError), naming the file."""
    usage = {}
    for name, counts in (value or {}).items():
        parts = [integer(counts.get(k)) for k in ("inputTokens", "cacheCreationInputTokens", "cacheReadInputTokens")]
        usage[str(name)] = ModelUsage(prompt_tokens=_total(parts), completion_tokens=integer(counts.get("outputTokens")),
                                      cost_usd=number(counts.get("costUSD")))
    return usage


def _total(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _account(event: dict[str, Any], parsed: ParsedStream) -> None:
    """The result event's tokens and cost; per model when it says (see the module docstring)."""
    usage = event.get("usage") or {}  # of the wrong shape it fails below, naming the file
    parsed.model_usage = _model_usage(event.get("modelUsage"))
    parsed.cost_usd = number(event.get("total_cost_usd"))
    if parsed.model_usage:
        models = parsed.model_usage.values()
        parsed.prompt_tokens = _total([m.prompt_tokens for m in models])
        parsed.completion_tokens = _total([m.completion_tokens for m in models])
        if parsed.cost_usd is None:
            costs = [m.cost_usd for m in models]
            parsed.cost_usd = sum(c for c in costs if c is not None) if None not in costs else None
    else:
        parsed.prompt_tokens = _prompt_tokens(usage)
        parsed.completion_tokens = integer(usage.get("output_tokens"))


def _note_model(event: dict[str, Any], parsed: ParsedStream) -> None:
    if parsed.model is not None:
        return
    message = event.get("message") if event.get("type") == "assistant" else event
    model = message.get("model") if isinstance(message, dict) and event.get("type") in ("system", "assistant") else None
    if isinstance(model, str) and model and not model.startswith("<"):  # `<synthetic>`: Claude Code's own text
        parsed.model = model


def parse_claude_stream(text: str, *, origin: str) -> ParsedStream:
    """Parse Claude Code stream-json text; `origin` names the source in log messages."""
    steps = StepList()
    parsed = ParsedStream()
    calls = _Calls()
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
        _note_model(event, parsed)
        if kind == "assistant":
            message_id = _assistant(event, steps, message_id, calls)
            continue
        message_id = None
        if kind == "user":
            _user(event, steps, calls)
        elif kind == "result":
            parsed.saw_result = True
            parsed.final_output = event.get("result") if isinstance(event.get("result"), str) else ""
            _account(event, parsed)
            parsed.is_error = bool(event.get("is_error")) or str(event.get("subtype", "")).startswith("error")
    if parsed.bad_lines:
        log.debug("%s: %d line(s) of the stream were not JSON objects", origin, parsed.bad_lines)
    parsed.steps = steps.steps()
    if not parsed.final_output:
        parsed.final_output = last_text(parsed.steps, "agent")
    return parsed
