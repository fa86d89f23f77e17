"""ATIF (Agent Trajectory Interchange Format, Harbor's RFC 0001) JSON -> a trace.

Root: `schema_version` ("ATIF-v1.x"), `session_id`, `agent` {name, model_name},
`steps[]`, optional `final_metrics` {total_prompt_tokens, total_completion_tokens,
total_cost_usd}. A step: `step_id`, `source` (system|user|agent), `message` (a string,
or content parts from v1.6), `reasoning_content`, `tool_calls[]` {tool_call_id,
function_name, arguments}, `observation` {results[] {source_call_id, content}}.

An ATIF agent step bundles the model's turn with the results of its tool calls; here
the reasoning (when given) is its own agent step before the message, marked as
reasoning, and each observation result becomes its own `tool` step after it (SPEC §3),
naming the call it answers (`source_call_id`; a step's only result, unnamed, answers its
only call) and that call's tool.

Also read: a step with `is_copied_context: true` repeats context from an earlier
trajectory (kept across a summarisation), so it is skipped, never shown twice; a
result that only references a subagent's trajectory (`subagent_trajectory_ref[]`
{trajectory_id, trajectory_path, session_id, extra.summary}, terminus-2's handoffs)
becomes a step naming that trajectory and its summary; the model is `agent.model_name`,
else the first agent step's own `model_name` (OpenHands writes it only there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deep_pipeline.core.models import ToolCall, Trace
from deep_pipeline.errors import InputError
from deep_pipeline.traces.common import (
    REASONING,
    StepList,
    arguments_text,
    block_text,
    first_text,
    integer,
    last_text,
    number,
)

_SOURCES = ("system", "user", "agent")


def is_atif(data: Any) -> bool:
    return isinstance(data, dict) and "schema_version" in data and isinstance(data.get("steps"), list)


def _add_step(step: Any, index: int, steps: StepList, label: str) -> None:
    if not isinstance(step, dict):
        raise InputError(f"{label}: steps[{index}]: expected an object")
    source = step.get("source")
    if source not in _SOURCES:
        raise InputError(f"{label}: steps[{index}].source: expected one of system|user|agent, got {source!r}")
    if step.get("is_copied_context") is True:
        return  # copied from an earlier trajectory: already seen there, not a new step
    reasoning = step.get("reasoning_content")
    if source == "agent" and isinstance(reasoning, str) and reasoning.strip():
        steps.add("agent", reasoning, kind=REASONING)
    calls = [
        ToolCall(name=str(call.get("function_name", "")), arguments=arguments_text(call.get("arguments")),
                 call_id=call.get("tool_call_id"))
        for call in step.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    text = block_text(step.get("message"))
    if text or calls or source != "agent":
        steps.add(source, text, calls)
    results = [r for r in (step.get("observation") or {}).get("results") or [] if isinstance(r, dict)]
    for result in results:
        call_id = result.get("source_call_id")
        if call_id is None and len(calls) == 1 and len(results) == 1:
            call_id = calls[0].call_id  # older writers (terminus-2, ATIF 1.5) leave the only call unnamed
        steps.add_result(_result_text(result), call_id)


def _result_text(result: dict[str, Any]) -> str:
    """A result's content, then a line per subagent trajectory it refers to (path and summary)."""
    parts = [block_text(result.get("content"))]
    for ref in result.get("subagent_trajectory_ref") or []:
        if isinstance(ref, dict):
            parts.append(_subagent_line(ref))
    return "\n".join(p for p in parts if p)


def _subagent_line(ref: dict[str, Any]) -> str:
    where = next((ref[k] for k in ("trajectory_path", "trajectory_id", "session_id") if isinstance(ref.get(k), str)
                  and ref[k]), "?")
    extra = ref.get("extra") if isinstance(ref.get("extra"), dict) else {}
    summary = extra.get("summary")
    return f"[subagent trajectory {where}]" + (f" {block_text(summary)}" if summary else "")


def _model(data: dict[str, Any], agent: dict[str, Any]) -> str | None:
    """`agent.model_name`, else the first new agent step's `model_name` (copied ones may be older)."""
    if isinstance(agent.get("model_name"), str) and agent["model_name"]:
        return agent["model_name"]
    return next((s["model_name"] for s in data["steps"] if isinstance(s, dict) and s.get("source") == "agent"
                 and s.get("is_copied_context") is not True and isinstance(s.get("model_name"), str)
                 and s["model_name"]), None)


def trace_from_atif(data: dict[str, Any], *, trace_id: str, label: str) -> Trace:
    steps = StepList()
    for index, step in enumerate(data["steps"]):
        _add_step(step, index, steps, label)
    done = steps.steps()
    agent = data.get("agent") if isinstance(data.get("agent"), dict) else {}
    metrics = data.get("final_metrics") if isinstance(data.get("final_metrics"), dict) else {}
    return Trace(
        trace_id=trace_id,
        agent=agent.get("name"),
        model=_model(data, agent),
        prompt=first_text(done, "user"),
        steps=done,
        final_output=last_text(done, "agent"),
        prompt_tokens=integer(metrics.get("total_prompt_tokens")),
        completion_tokens=integer(metrics.get("total_completion_tokens")),
        cost_usd=number(metrics.get("total_cost_usd")),
    )


def import_atif(path: Path, data: dict[str, Any]) -> Trace:
    session = data.get("session_id")
    trace_id = session if isinstance(session, str) and session else Path(path).stem
    return trace_from_atif(data, trace_id=trace_id, label=str(path))
