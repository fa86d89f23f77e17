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
  1.x has no exit message: its last message is a `user` one the harness wrote (the
  submission, or the exception's text), read here like 2.x's exit message, not as the user.

A tool step names the call it answers (`tool_call_id`, Responses' `call_id`) and is an
error when the command failed: a non-zero `extra.returncode` (2.x) or `<returncode>` (1.x).
The model is `info.config.model.model_name`; the task is the top-level `instance_id`
(SWE-bench runs write it). The prompt is the task, not the scaffold around it: the text
of the first user message's `<pr_description>` (1.x and 2.x SWE-bench templates put the
instance's problem statement there), else that whole message.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.models import ErrorCategory, ToolCall, TraceStep
from deep_pipeline.errors import InputError
from deep_pipeline.traces.common import StepList, arguments_text, block_text, first_text, integer, last_text, number

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
    model: str | None = None
    task_name: str | None = None
    prompt: str = ""


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


def _failed(message: dict[str, Any], text: str) -> bool:
    """The command's exit code was not 0: 2.x's `extra.returncode`, else 1.x's `<returncode>` tag."""
    code = (message.get("extra") or {}).get("returncode")
    if code is None:
        start = text.find("<returncode>")
        end = text.find("</returncode>", start)
        code = text[start + len("<returncode>"):end].strip() if 0 <= start < end else None
    return code is not None and str(code) != "0"


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


def _add_message(message: dict[str, Any], steps: StepList, seen_agent: bool) -> None:
    """Add one message's step(s) (the exit message is read apart, by `_exit`)."""
    role = message.get("role")
    text = block_text(message.get("content"))
    if message.get("object") == "response":
        _response_output(message, steps)
    elif message.get("type") == "function_call_output":
        output = block_text(message.get("output"))
        steps.add_result(output, message.get("call_id"), is_error=_failed(message, output))
    elif role == "assistant":
        steps.add("agent", text, _assistant_calls(message, text))
    elif role == "tool" or (role == "user" and _is_observation(message, text, seen_agent)):
        steps.add_result(text, message.get("tool_call_id"), is_error=_failed(message, text))
    elif role in ("system", "user") and text.strip():
        steps.add(role, text)


def _exit(status: str, text: str, steps: StepList) -> str:
    """The harness's record of how the run ended. A submission is the final output, shown
    once as such; any other end is a `system` step."""
    if status != "Submitted":
        steps.add("system", f"exit: {status}" + (f"\n{text}" if text else ""))
    return status


def _is_v1_exit(messages: list[Any], index: int, info: dict[str, Any], seen_agent: bool) -> bool:
    """1.x's last message: the harness's `user` message with the submission or the error."""
    message = messages[index]
    return (index == len(messages) - 1 and seen_agent and bool(info.get("exit_status"))
            and message.get("role") == "user" and not _is_observation(message, block_text(message.get("content")), True)
            and not any(isinstance(m, dict) and m.get("role") == "exit" for m in messages))


def _prompt(steps: list[TraceStep]) -> str:
    """The task in the first user message's `<pr_description>`, else that whole message."""
    text = first_text(steps, "user")
    start, end = text.find("<pr_description>"), text.find("</pr_description>")
    if not 0 <= start < end:
        return text
    task = text[start + len("<pr_description>"):end].strip()
    lead = "Consider the following PR description:"  # mini-swe-agent's template line, not the task
    return task[len(lead):].strip() if task.startswith(lead) else task


def _text_field(data: dict[str, Any], *path: str) -> str | None:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, str) and data else None


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
    exit_text = ""  # what the harness recorded at the end (a submission, an error)
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InputError(f"{origin}: messages[{index}]: expected an object")
        if message.get("role") == "exit" or _is_v1_exit(messages, index, info, seen_agent):
            exit_text = block_text(message.get("content"))
            status = (message.get("extra") or {}).get("exit_status") or info.get("exit_status")
            exit_status = _exit(str(status or ""), exit_text, steps) or exit_status
            continue
        _add_message(message, steps, seen_agent)
        last = steps.last()
        seen_agent = seen_agent or (last is not None and last.source == "agent")
    exit_status = str(info.get("exit_status") or exit_status or "") or None
    prompt_tokens, completion_tokens = _token_usage(messages)
    done = steps.steps()
    submission = _text_field(info, "submission") or (exit_text if exit_status == "Submitted" else None)
    return MiniSweTrajectory(
        steps=done,
        final_output=submission or last_text(done, "agent"),
        exit_status=exit_status,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=number((info.get("model_stats") or {}).get("instance_cost")),
        model=_text_field(info, "config", "model", "model_name"),
        task_name=_text_field(data, "instance_id"),
        prompt=_prompt(done),
    )
