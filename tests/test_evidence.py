"""Evidence is kept only when the quote is really in the cited step (SPEC §3)."""

from __future__ import annotations

import json

from deep_pipeline.core.evidence import fold_whitespace, step_full_text, validate_evidence
from deep_pipeline.core.models import EvidenceRef, ToolCall, Trace, TraceStep

TRACE = Trace(
    trace_id="t1",
    steps=[
        TraceStep(step=1, source="user", text="Fill the form in\n   form.pdf"),
        TraceStep(step=2, source="agent", text="I will list the fields.",
                  tool_calls=[ToolCall(name="bash", arguments=json.dumps({"command": 'grep -n "Name"\n  form.txt'}))]),
        TraceStep(step=3, source="tool", text="Name: 1\nDate: 2"),
    ],
)


def ref(quote: str, step: int = 1, trace_id: str = "t1") -> EvidenceRef:
    return EvidenceRef(trace_id=trace_id, step=step, quote=quote)


def test_fold_whitespace() -> None:
    assert fold_whitespace("  a\n\tb   c\r\n") == "a b c"


def test_quotes_match_across_whitespace_differences() -> None:
    kept, dropped = validate_evidence([ref("Fill the form in form.pdf"), ref("Name: 1 Date:", step=3)], [TRACE])
    assert (len(kept), dropped) == (2, 0)


def test_quotes_match_tool_calls_raw_and_decoded() -> None:
    evidence = [ref("bash", step=2), ref('grep -n "Name" form.txt', step=2), ref('\\"Name\\"', step=2)]
    kept, dropped = validate_evidence(evidence, [TRACE])
    assert kept == evidence and dropped == 0


def test_invalid_references_are_dropped_and_counted_in_order() -> None:
    good = ref("list the fields", step=2)
    evidence = [
        ref("Fill the form", trace_id="t9"),  # no such trace
        ref("Fill the form", step=0),  # no step 0
        ref("Fill the form", step=4),  # past the last step
        good,
        ref("Fill the form", step=2),  # in the trace, but another step
        ref("fill the form"),  # case matters
        ref("  \n "),  # folds to nothing
    ]
    kept, dropped = validate_evidence(evidence, [TRACE])
    assert kept == [good] and dropped == 6


def test_no_traces_no_valid_evidence_and_no_error() -> None:
    assert validate_evidence([ref("anything")], []) == ([], 1)
    assert validate_evidence([], []) == ([], 0)


def test_full_text_of_a_step_with_non_json_arguments() -> None:
    step = TraceStep(step=1, source="agent", text="run", tool_calls=[ToolCall(name="shell", arguments="ls -la {")])
    assert step_full_text(step) == "run\nshell ls -la {"
