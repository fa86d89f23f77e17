"""ATIF (Agent Trajectory Interchange Format, Harbor's RFC 0001) JSON -> a trace.

Root: `schema_version` ("ATIF-v1.x"), `session_id`, `agent` {name, model_name},
`steps[]`, optional `final_metrics` {total_prompt_tokens, total_completion_tokens,
total_cost_usd}. A step: `step_id`, `source` (system|user|agent), `message` (a string,
or content parts from v1.6), `reasoning_content`, `tool_calls[]` {tool_call_id,
function_name, arguments}, `observation` {results[] {source_call_id, content}}.

An ATIF agent step bundles the model's turn with the results of its tool calls; here
the reasoning (when given) is its own agent step before the message, and each
observation result becomes its own `tool` step after it (SPEC §3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deep_pipeline.core.models import ToolCall, Trace
from deep_pipeline.errors import InputError
from deep_pipeline.traces.common import StepList, arguments_text, block_text, first_text, integer, last_text, number

_SOURCES = ("system", "user", "agent")


def is_atif(data: Any) -> bool:
    return isinstance(data, dict) and "schema_version" in data and isinstance(data.get("steps"), list)


def _add_step(step: Any, index: int, steps: StepList, label: str) -> None:
    if not isinstance(step, dict):
        raise InputError(f"{label}: steps[{index}]: expected an object")
    source = step.get("source")
    if source not in _SOURCES:
        raise InputError(f"{label}: steps[{index}].source: expected one of system|user|agent, got {source!r}")
    reasoning = step.get("reasoning_content")
    if source == "agent" and isinstance(reasoning, str) and reasoning.strip():
        steps.add("agent", reasoning, kind="agent_thought")
    calls = [
        ToolCall(name=str(call.get("function_name", "")), arguments=arguments_text(call.get("arguments")),
                 call_id=call.get("tool_call_id"))
        for call in step.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    text = block_text(step.get("message"))
    if text or calls or source != "agent":
        steps.add(source, text, calls)
    for result in (step.get("observation") or {}).get("results") or []:
        if isinstance(result, dict):
            steps.add("tool", block_text(result.get("content")))


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
        model=agent.get("model_name"),
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
