"""mini-swe-agent trajectory JSON -> trace steps (1.x and 2.x formats).

What mini-swe-agent writes (read from its 2.4.6 source, `agents/default.py` serialize):
`{"info": {"exit_status", "submission", "model_stats": {"instance_cost", "api_calls"}},
"messages": [...], "trajectory_format": "mini-swe-agent-1.1"}` (1.x wrote
"mini-swe-agent-1"). Messages:
- `system`, `user`: the prompt; `assistant`: the model's answer, with OpenAI-style
  `tool_calls` (2.x tool-call mode) or a fenced bash block in `content` (1.x, 2.x text
  mode), and `extra.actions` (2.x) listing the commands;
- observations: `role: "tool"` with `tool_call_id` (2.x tool calls), or `role: "user"`
  with `extra.returncode` (2.x text mode) or a `<returncode>` tag (1.x) -> `tool` steps;
- Responses-API models write `{"object": "response", "output": [...]}` and
  `{"type": "function_call_output", "output"}` items;
- `role: "exit"`: the end, `extra.exit_status` (Submitted, LimitsExceeded,
  TimeExceeded, or an exception's class name); not Submitted -> a `system` step.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.models import ErrorCategory, ToolCall, TraceStep
from deep_pipeline.errors import InputError
from deep_pipeline.traces.common import StepList, arguments_text, block_text, integer, last_text, number

_MD = MarkdownIt("commonmark")
_COMMAND_FENCES = ("bash", "sh", "mswea_bash_command")


class MiniSweTrajectory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: list[TraceStep] = Field(default_factory=list)
    final_output: str = ""
    exit_status: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None


def exit_category(exit_status: str | None) -> ErrorCategory | None:
    """SPEC §3's category for a mini-swe-agent exit status (None = finished normally)."""
    if not exit_status or exit_status == "Submitted":
        return None
    if exit_status == "TimeExceeded" or "Timeout" in exit_status:
        return "timeout"
    if any(word in exit_status for word in ("API", "RateLimit", "Authentication", "Connection", "NotFound")):
        return "api_error"
    return "agent_error"  # LimitsExceeded, RepeatedFormatError, an uncaught exception


def _fenced_commands(text: str) -> list[ToolCall]:
    """The bash blocks of a text-mode answer (markdown-it fences, not a regex)."""
    return [
        ToolCall(name="bash", arguments=token.content.rstrip("\n"))
        for token in _MD.parse(text)
        if token.type == "fence" and token.info.strip() in _COMMAND_FENCES
    ]


def _assistant_calls(message: dict[str, Any], text: str) -> list[ToolCall]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append(ToolCall(name=str(function.get("name", "")), arguments=arguments_text(function.get("arguments")),
                              call_id=call.get("id")))
    if calls:
        return calls
    actions = (message.get("extra") or {}).get("actions") or []
    if actions:
        return [ToolCall(name="bash", arguments=str(a.get("command", "")), call_id=a.get("tool_call_id"))
                for a in actions if isinstance(a, dict)]
    return _fenced_commands(text)


def _is_observation(message: dict[str, Any], text: str, seen_agent: bool) -> bool:
    extra = message.get("extra") or {}
    return seen_agent and ("returncode" in extra or "raw_output" in extra or "<returncode>" in text)


def _response_output(message: dict[str, Any], steps: StepList) -> None:
    """A Responses-API answer: message items are text, function_call items are calls."""
    texts, calls = [], []
    for item in message.get("output") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts.append(block_text(item.get("content")))
        elif item.get("type") == "function_call":
            calls.append(ToolCall(name=str(item.get("name", "")), arguments=arguments_text(item.get("arguments")),
                                  call_id=item.get("call_id") or item.get("id")))
    steps.add("agent", "\n".join(t for t in texts if t), calls)


def _add_message(message: dict[str, Any], steps: StepList, seen_agent: bool) -> str | None:
    """Add one message's step(s); return the exit status if it is the exit message."""
    role = message.get("role")
    text = block_text(message.get("content"))
    if message.get("object") == "response":
        _response_output(message, steps)
    elif message.get("type") == "function_call_output":
        steps.add("tool", block_text(message.get("output")))
    elif role == "assistant":
        steps.add("agent", text, _assistant_calls(message, text))
    elif role == "tool" or (role == "user" and _is_observation(message, text, seen_agent)):
        steps.add("tool", text)
    elif role in ("system", "user") and text.strip():  # 1.x ends with an empty user message
        steps.add(role, text)
    elif role == "exit":
        status = str((message.get("extra") or {}).get("exit_status") or "")
        if status != "Submitted":
            steps.add("system", f"exit: {status}" + (f"\n{text}" if text else ""))
        return status
    return None


def _token_usage(messages: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    prompt = completion = None
    for message in messages:
        usage = ((message.get("extra") or {}).get("response") or {}).get("usage") or message.get("usage")
        if not isinstance(usage, dict):
            continue
        got_prompt = integer(usage.get("prompt_tokens", usage.get("input_tokens")))
        got_completion = integer(usage.get("completion_tokens", usage.get("output_tokens")))
        if got_prompt is not None:
            prompt = (prompt or 0) + got_prompt
        if got_completion is not None:
            completion = (completion or 0) + got_completion
    return prompt, completion


def steps_from_miniswe(data: dict, *, origin: str) -> MiniSweTrajectory:
    """Turn a parsed mini-swe-agent trajectory into steps; `origin` names it in errors."""
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list):
        raise InputError(f"{origin}: messages: expected a list of mini-swe-agent messages")
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    steps = StepList()
    exit_status = None
    seen_agent = False  # a user message is an observation only once the agent has acted
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InputError(f"{origin}: messages[{index}]: expected an object")
        exit_status = _add_message(message, steps, seen_agent) or exit_status
        last = steps.last()
        seen_agent = seen_agent or (last is not None and last.source == "agent")
    exit_status = str(info.get("exit_status") or exit_status or "") or None
    prompt_tokens, completion_tokens = _token_usage(messages)
    done = steps.steps()
    submission = info.get("submission")
    return MiniSweTrajectory(
        steps=done,
        final_output=submission if isinstance(submission, str) and submission else last_text(done, "agent"),
        exit_status=exit_status,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=number((info.get("model_stats") or {}).get("instance_cost")),
    )
