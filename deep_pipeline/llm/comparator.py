"""The blind comparison of one cell, incumbent against candidate (SPEC §6.5).

The judge sees the two versions as A and B (the candidate is `candidate_label`), each
with its own traces under neutral labels (A1, A2, … / B1, …) so neither the order nor
the trace ids tell which version is new. The answer is mapped back to incumbent and
candidate before it leaves this module.
"""

from __future__ import annotations

from typing import Literal

from deep_pipeline.core.config import Dimension
from deep_pipeline.core.models import Comparison, Trace, Unit
from deep_pipeline.llm.accounting import CallRecord
from deep_pipeline.llm.client import ModelClient
from deep_pipeline.llm.judge import checked_evidence
from deep_pipeline.llm.prompts import fill, profile, rubric_text
from deep_pipeline.llm.render import render_traces
from deep_pipeline.llm.schemas import compare_answer_model


def blind_labels(traces: list[Trace], side: str) -> dict[str, str]:
    """Trace id -> neutral label shown to the judge."""
    return {trace.trace_id: f"{side}{index}" for index, trace in enumerate(traces, start=1)}


def compare_cell(
    client: ModelClient,
    *,
    step_key: str,
    task_prompt: str,
    unit: Unit,
    old_text: str,
    new_text: str,
    dimension: Dimension,
    incumbent_traces: list[Trace],
    candidate_traces: list[Trace],
    candidate_label: Literal["A", "B"],
    order_seed: int,
) -> tuple[Comparison, list[CallRecord]]:
    limits, render = profile(client)
    incumbent_label = "B" if candidate_label == "A" else "A"
    sides = {candidate_label: (new_text, candidate_traces), incumbent_label: (old_text, incumbent_traces)}
    labels = {side: blind_labels(traces, side) for side, (_, traces) in sides.items()}
    user = fill(
        "compare_user",
        task=task_prompt,
        dimension=dimension.name,
        description=dimension.description,
        rubric=rubric_text(dimension),
        unit_id=unit.unit_id,
        text_a=sides["A"][0],
        text_b=sides["B"][0],
        traces_a=render_traces(sides["A"][1], render, labels["A"]),
        traces_b=render_traces(sides["B"][1], render, labels["B"]),
    )
    messages = [{"role": "system", "content": fill("compare_system")}, {"role": "user", "content": user}]
    answer, calls = client.structured(step_key, messages, compare_answer_model(limits))

    side = candidate_label.lower()
    back = {label: trace_id for trace_id, label in labels[candidate_label].items()}
    kept, dropped = checked_evidence(getattr(answer, f"evidence_{side}"), candidate_traces, rename=back)
    # The judge's regressions only: the timeout rule (SPEC §6.5) is core.decision's, applied when deciding.
    regressions = _unique(getattr(answer, f"regressions_{side}"))
    comparison = Comparison(
        incumbent_score=getattr(answer, f"score_{incumbent_label.lower()}"),
        candidate_score=getattr(answer, f"score_{side}"),
        task_relevant=answer.task_relevant,
        runtime_regressions=regressions,
        candidate_evidence=kept,
        dropped_evidence=dropped,
        reason=answer.reason,
        candidate_label=candidate_label,
        order_seed=order_seed,
    )
    return comparison, calls


def _unique(items: list[str]) -> list[str]:
    seen: list[str] = []
    for item in (i.strip() for i in items):
        if item and item not in seen:
            seen.append(item)
    return seen
