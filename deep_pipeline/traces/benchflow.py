"""BenchFlow rollout folders and ACP event streams -> traces.

A BenchFlow rollout folder holds `result.json` (task_name, rollout_name, agent, model,
agent_result {n_input_tokens, n_output_tokens, cost_usd}, error, error_category,
timing) and `trajectory/acp_trajectory.jsonl`. That file holds ACP session updates in
one of two shapes, both read here:

- raw ACP `session/update` notifications (or their `update` objects):
  `{"sessionUpdate": "agent_message_chunk" | "agent_thought_chunk" |
  "user_message_chunk", "content": {"type": "text", "text"}}`,
  `{"sessionUpdate": "tool_call", "toolCallId", "title", "kind", "rawInput", "status"}`,
  `{"sessionUpdate": "tool_call_update", "toolCallId", "status", "content"}`;
- BenchFlow's capture records, chunks already merged: `{"type": "user_message" |
  "agent_message" | "agent_thought", "text"}`, `{"type": "tool_call", "tool_call_id",
  "kind", "title", "status", "content"}`, `{"type": "agent_timeout", "timeout_sec"}`.

Consecutive chunks of one kind are one step; a tool call joins the agent step it
follows; its output is its own `tool` step, placed where the call finished, naming the
call and its tool (an error when the call `failed`). A thought is marked as reasoning.

A file none of whose lines is one of those (say `{"type": "tool_call", "tool", "args"}`,
with neither call id nor kind nor title, and `{"type": "final"}`: a near-miss of the
capture schema) is refused, naming its first line, rather than read as an empty trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deep_pipeline.core.models import ErrorCategory, ToolCall, Trace
from deep_pipeline.errors import InputError
from deep_pipeline.inputs.jsonfile import parse_json
from deep_pipeline.traces.common import (
    StepList,
    arguments_text,
    block_text,
    category_from_text,
    first_text,
    integer,
    json_line_objects,
    last_text,
    number,
    read_object,
    read_text,
)

TRAJECTORY = Path("trajectory") / "acp_trajectory.jsonl"
_TEXT_KINDS = {
    "agent_message_chunk": ("agent", "agent"),
    "agent_message": ("agent", "agent"),
    "agent_thought_chunk": ("agent", "agent_thought"),
    "agent_thought": ("agent", "agent_thought"),
    "user_message_chunk": ("user", "user"),
    "user_message": ("user", "user"),
}
_TERMINAL = ("completed", "failed", "cancelled")
# Every update kind that marks a file as an ACP stream; plan and mode updates make no step.
ACP_KINDS = frozenset(_TEXT_KINDS) | {
    "tool_call", "tool_call_update", "agent_timeout", "plan", "available_commands_update", "current_mode_update",
}
# Every error category BenchFlow writes (benchflow/_utils/scoring.py, diagnostics.py) -> SPEC §3's.
# The provider's failures are the machinery's (SPEC §9: api_error, run again), not the agent's;
# a rejected request (the agent's context outgrew the model's window) is the agent's own run.
_CATEGORIES: dict[str, ErrorCategory] = {
    "timeout": "timeout",
    "idle_timeout": "idle_timeout",
    "install_failure": "sandbox_setup",
    "infra_failure": "sandbox_setup",
    "sandbox_setup": "sandbox_setup",
    "provider_auth": "api_error",
    "provider_rate_limit": "api_error",
    "api_error": "api_error",
    "suspected_api_error": "api_error",  # no token and no tool call: the model was never reached
    "provider_rejected": "agent_error",
    "pipe_closed": "agent_error",
    "acp_error": "agent_error",
    "other": "agent_error",
}


@dataclass
class _AcpState:
    steps: StepList = field(default_factory=StepList)
    outputs: dict[str, str] = field(default_factory=dict)  # call id -> output so far
    open_calls: list[str] = field(default_factory=list)  # started, result not yet placed
    seen_calls: set[str] = field(default_factory=set)
    timed_out: bool = False


def event_kind(event: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Unwrap a JSON-RPC notification and name the update's kind."""
    params = event.get("params")
    if isinstance(params, dict) and isinstance(params.get("update"), dict):
        event = params["update"]
    elif isinstance(event.get("update"), dict):
        event = event["update"]
    kind = event.get("sessionUpdate", event.get("type"))
    return event, kind if isinstance(kind, str) else None


def _call_id(event: dict[str, Any]) -> str:
    return str(event.get("toolCallId", event.get("tool_call_id", "")))


def recognised(event: dict[str, Any]) -> bool:
    """An update this reader can use: a known kind, and a tool call with its id or what it ran
    (BenchFlow's gemini-cli fallback writes an empty id but a kind and title)."""
    event, kind = event_kind(event)
    if kind in ("tool_call", "tool_call_update"):
        return any(event.get(key) for key in ("toolCallId", "tool_call_id", "kind", "title", "rawInput"))
    return kind in ACP_KINDS


def _finish_call(state: _AcpState, call_id: str, failed: bool = False) -> None:
    if call_id in state.open_calls:
        state.open_calls.remove(call_id)
        state.steps.add_result(state.outputs.pop(call_id, ""), call_id, is_error=failed)


def _tool_call(event: dict[str, Any], state: _AcpState) -> None:
    call_id = _call_id(event)
    raw_input = event.get("rawInput")
    # ACP's kind (execute, read, edit, ...) names the tool; the title is the command line.
    call = ToolCall(name=str(event.get("kind") or event.get("title") or "tool"),
                    arguments=arguments_text(raw_input) if raw_input is not None else str(event.get("title") or ""),
                    call_id=call_id or None)
    last = state.steps.last()
    if last is not None and last.source == "agent" and last.kind == "agent":
        last.tool_calls.append(call)
    else:
        state.steps.add("agent", "", [call], kind="agent")
    state.open_calls.append(call_id)
    state.seen_calls.add(call_id)
    _tool_update(event, state, call_id)


def _tool_update(event: dict[str, Any], state: _AcpState, call_id: str | None = None) -> None:
    call_id = call_id if call_id is not None else _call_id(event)
    text = block_text(event.get("content"))
    if text:
        # ACP updates replace the call's content; BenchFlow's records carry all of it.
        state.outputs[call_id] = text
    if event.get("status") in _TERMINAL:
        _finish_call(state, call_id, failed=event.get("status") == "failed")


def steps_from_acp(events: list[dict[str, Any]]) -> _AcpState:
    state = _AcpState()
    for raw in events:
        event, kind = event_kind(raw)
        if not recognised(raw):
            continue  # a near-miss record (a tool call naming neither its id nor what it ran)
        if kind in _TEXT_KINDS:
            source, step_kind = _TEXT_KINDS[kind]
            text = event.get("text") if isinstance(event.get("text"), str) else block_text(event.get("content"))
            if text:
                state.steps.add_chunk(source, text, step_kind)
        elif kind == "tool_call":
            _tool_call(event, state)
        elif kind == "tool_call_update":
            known = _call_id(event) in state.seen_calls
            # An update for a call never announced still records a call (BenchFlow does the same).
            (_tool_update if known else _tool_call)(event, state)
        elif kind == "agent_timeout":
            state.timed_out = True
            state.steps.add("system", f"agent timed out after {event.get('timeout_sec', '?')} s")
    for call_id in list(state.open_calls):
        if state.outputs.get(call_id):
            _finish_call(state, call_id)  # output with no final status: keep what there is
    return state


def read_acp_events(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of an ACP JSONL file; a bad line is an error naming file:line, and so
    is a file of which no line is an update this reader knows (it would read as an empty trace)."""
    lines = list(json_line_objects(read_text(path), path, invalid="invalid JSON (truncated file?): {msg}",
                                   not_object="expected a JSON object per line"))
    if lines and not any(recognised(event) for _, event in lines):
        label, event = lines[0]
        _, kind = event_kind(event)
        raise InputError(f"{label}: no line is an ACP session update or a BenchFlow capture record (this one: "
                         f"type {kind!r}, keys {', '.join(sorted(event)[:6])}); expected sessionUpdate or type "
                         "user_message|agent_message|agent_thought|tool_call with tool_call_id, kind, title")
    return [event for _, event in lines]


def _error(result: dict[str, Any]) -> tuple[ErrorCategory | None, str | None]:
    error = result.get("error")
    if not error:
        return None, None
    category = _CATEGORIES.get(str(result.get("error_category") or ""))
    return category or category_from_text(str(error)), str(error)[:500]


def _prompt(folder: Path) -> str:
    prompts = folder / "prompts.json"
    if prompts.is_file():
        data = parse_json(read_text(prompts), str(prompts))
        if isinstance(data, list) and data and isinstance(data[0], str):
            return data[0]
    return ""


def trace_from_acp_events(events: list[dict[str, Any]], *, trace_id: str, **fields: Any) -> Trace:
    state = steps_from_acp(events)
    done = state.steps.steps()
    if state.timed_out and not fields.get("error_category"):
        fields["error_category"] = "timeout"
    fields.setdefault("prompt", first_text(done, "user"))
    return Trace(trace_id=trace_id, steps=done, final_output=last_text(done, "agent"), **fields)


def import_benchflow(folder: Path) -> Trace:
    result = read_object(folder / "result.json")
    category, reason = _error(result)
    usage = result.get("agent_result") if isinstance(result.get("agent_result"), dict) else {}
    timing = result.get("timing") if isinstance(result.get("timing"), dict) else {}
    fields: dict[str, Any] = dict(
        agent=result.get("agent") if isinstance(result.get("agent"), str) else None,
        model=result.get("model") if isinstance(result.get("model"), str) else None,
        error_category=category,
        error_reason=reason,
        duration_s=number(timing.get("agent_execution", timing.get("total"))),
        prompt_tokens=integer(usage.get("n_input_tokens")),
        completion_tokens=integer(usage.get("n_output_tokens")),
        cost_usd=number(usage.get("cost_usd")),
    )
    prompt = _prompt(folder)
    if prompt:
        fields["prompt"] = prompt
    name = result.get("rollout_name")
    trace_id = name if isinstance(name, str) and name else folder.name
    return trace_from_acp_events(read_acp_events(folder / TRAJECTORY), trace_id=trace_id, **fields)
