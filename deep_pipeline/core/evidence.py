"""Evidence checking (SPEC §3): a quote counts only if it is really in the step it cites.

A step's *full text*, which a quote must occur in, is these parts joined by newlines:

1. the step's `text`;
2. for each tool call, in order: `<name> <arguments>` (arguments as the agent gave
   them, usually JSON text);
3. for each tool call whose arguments are a JSON object or array: every string value
   in it, decoded (so a quoted command with `"` or newlines matches as the agent
   typed it, not only in its JSON-escaped form).

Both the quote and the full text are whitespace-folded (every run of whitespace,
newlines included, becomes one space; ends trimmed) before the substring test, which
is case-sensitive. A quote that folds to nothing is invalid: it would match anything.
Invalid evidence is dropped and counted; checking never raises.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from deep_pipeline.core.models import EvidenceRef, Trace, TraceStep


def fold_whitespace(text: str) -> str:
    return " ".join(text.split())


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def decoded_strings(arguments: str) -> list[str]:
    """Every string value of JSON arguments, decoded; none when they are not a JSON object or array."""
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return []
    return list(_strings(value)) if isinstance(value, (dict, list)) else []


def step_full_text(step: TraceStep) -> str:
    """The text a quote from this step is checked against (see the module docstring)."""
    parts = [step.text]
    parts.extend(f"{call.name} {call.arguments}" for call in step.tool_calls)
    for call in step.tool_calls:
        parts.extend(decoded_strings(call.arguments))
    return "\n".join(parts)


def is_valid(ref: EvidenceRef, traces_by_id: dict[str, Trace]) -> bool:
    trace = traces_by_id.get(ref.trace_id)
    if trace is None or not 1 <= ref.step <= len(trace.steps):
        return False
    quote = fold_whitespace(ref.quote)
    return bool(quote) and quote in fold_whitespace(step_full_text(trace.steps[ref.step - 1]))


def validate_evidence(evidence: list[EvidenceRef], traces: list[Trace]) -> tuple[list[EvidenceRef], int]:
    """(the valid references in their order, how many were dropped)."""
    traces_by_id = {trace.trace_id: trace for trace in traces}
    kept = [ref for ref in evidence if is_valid(ref, traces_by_id)]
    return kept, len(evidence) - len(kept)


def quote_context(step_text: str, quote: str, width: int = 80) -> tuple[str, str, str] | None:
    """(text before, the quote as it stands in the step, text after), up to `width` characters
    each side, whitespace-folded as the check folds it, so a reader sees the quote in its step;
    None when the quote is not in the text (evidence that would have been dropped)."""
    folded, needle = fold_whitespace(step_text), fold_whitespace(quote)
    at = folded.find(needle) if needle else -1
    if at < 0:
        return None
    end = at + len(needle)
    before = folded[max(0, at - width):at]
    after = folded[end:end + width]
    return ("…" if at > width else "") + before, needle, after + ("…" if end + width < len(folded) else "")
