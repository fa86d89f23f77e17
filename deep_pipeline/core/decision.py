"""The decision rule of one iteration (SPEC §6.5–§6.6, §11 per task) and the blind A/B order.

Regression list format: the judge's `runtime_regressions` (core/comparison.py: one item
per valid claim, `<kind> (<trace id> step <n>)`, or `<kind>` for a face-value claim that
named no trace), each stripped of outer whitespace with inner whitespace folded, empty
ones dropped, duplicates dropped (first kept), commas replaced by ';' (the list itself is
comma-joined); then `timeout` is appended when the candidate's timed-out share is higher
than the incumbent's and the judge did not already name it. Items that only claims kept at face
value name (`regressions_need_evidence: false`, no quote the traces bear out) read the same in
the reason — the original design's reasons stay as they were — and are listed apart in the
decision's `unverified_regressions` (`<task>:<item>` in a task set of several). The reason is
`runtime_regressed:` + the items joined by `,`, e.g.
`runtime_regressed:failed_command (section-i00-r1 step 3),timeout`. In a task set of more
than one training task the first task with any is named: `runtime_regressed:<task>:<items>`.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from deep_pipeline.core.models import (
    ACCEPTED,
    NO_IMPROVEMENT,
    NOT_RELEVANT,
    REGRESSED_PREFIX,
    TASK_REGRESSED_PREFIX,
    Comparison,
    RegressionClaim,
    TaskComparison,
    TaskDecision,
    Trace,
)

TIMEOUT_REGRESSION = "timeout"


def timeout_share(traces: list[Trace]) -> float:
    """Share of traces that timed out (either timeout kind); 0 for no traces."""
    if not traces:
        return 0.0
    return sum(1 for trace in traces if trace.timed_out) / len(traces)


REGRESSION_CHARS = 60


def rule_regressions(incumbent_traces: list[Trace], candidate_traces: list[Trace]) -> list[str]:
    """The compiler's own regressions, whatever the judge says: `timeout` when the candidate timed out more."""
    return [TIMEOUT_REGRESSION] if timeout_share(candidate_traces) > timeout_share(incumbent_traces) else []


def regressions(comparison: Comparison, incumbent_traces: list[Trace], candidate_traces: list[Trace]) -> list[str]:
    """The judge's runtime regressions, cleaned, plus `timeout` when the candidate timed out more.

    The timeout rule's only home: comparison.json keeps the judge's regressions as it gave them.
    """
    items: list[str] = []
    for raw in comparison.runtime_regressions:
        item = clean_item(raw)
        if item and item not in items:
            items.append(item)
    items += [item for item in rule_regressions(incumbent_traces, candidate_traces) if item not in items]
    return items


def clean_item(raw: str) -> str:
    """One regression item as the reason reads it: whitespace folded, no comma, one short line."""
    item = " ".join(raw.split()).replace(",", ";")
    if len(item) > REGRESSION_CHARS:  # the reason stays one readable line; comparison.json keeps it whole
        item = item[: REGRESSION_CHARS - 1] + "…"
    return item


def claim_item(claim: RegressionClaim) -> str:
    """How a regression reads in a decision's reason: its kind and where, by real trace id."""
    return f"{claim.kind} ({claim.trace_id} step {claim.step})" if claim.trace_id else claim.kind


def unverified(comparison: Comparison) -> list[str]:
    """The regression items (cleaned as in the reason) that only claims kept at face value name
    (`regressions_need_evidence: false`, no quote the traces bear out): the reason reads them
    exactly as the original design did, so the decision lists them apart."""
    verified = {clean_item(claim_item(c)) for c in comparison.regressions if c.verified}
    items = [clean_item(claim_item(c)) for c in comparison.regressions if not c.verified]
    return list(dict.fromkeys(item for item in items if item and item not in verified))


def decide(
    comparison: Comparison,
    incumbent_traces: list[Trace],
    candidate_traces: list[Trace],
    min_gain: float,
) -> tuple[bool, str, float]:
    """(accepted, reason, delta): the first rule of SPEC §6.6 that applies.

    A compile of one task is a task set of one training task (SPEC §11): the same rule.
    """
    one = TaskComparison(task="", comparison=comparison, incumbent_traces=incumbent_traces,
                         candidate_traces=candidate_traces)
    verdict = decide_tasks([one], min_gain, max_task_loss=0.0)
    return verdict.accepted, verdict.reason, verdict.delta


def decide_tasks(compared: list[TaskComparison], min_gain: float, max_task_loss: float) -> TaskDecision:
    """The first rule of SPEC §6.6 / §11 that applies, over every training task's comparison.

    Tasks are named in a reason only when there is more than one: with one task the reasons
    are exactly §6.6's. With one task the per-task loss rule can never fire first either
    (its delta below -max_task_loss <= 0 < min_gain already fails the gain), so it is skipped
    and the reason stays `target_cell_did_not_improve`. A rule naming a task names the first
    such task in the set's order; every task's delta and regressions are recorded.

    The gain rule also needs, of every task whose comparison asked more than one pair, a gain
    bound above 0 (`gain_shown`): an unsure verdict that more pairs did not settle is no gain.
    """
    if not compared:
        raise ValueError("a decision needs at least one task's comparison")
    named = len(compared) > 1
    # Means of up to 10 calls: rounding keeps a delta of exactly min_gain from reading 0.49999….
    deltas = {c.task: round(float(c.comparison.candidate_score - c.comparison.incumbent_score), 9) for c in compared}
    delta = round(sum(deltas.values()) / len(deltas), 9)
    found = {c.task: items for c in compared
             if (items := regressions(c.comparison, c.incumbent_traces, c.candidate_traces))}

    face_value = [(f"{c.task}:" if named else "") + item for c in compared for item in unverified(c.comparison)]

    def verdict(accepted: bool, reason: str) -> TaskDecision:
        return TaskDecision(accepted=accepted, reason=reason, delta=delta, task_deltas=deltas, task_regressions=found,
                            unverified_regressions=face_value)

    if not any(c.comparison.task_relevant for c in compared):
        return verdict(False, NOT_RELEVANT)
    if found:
        task, items = next(iter(found.items()))
        return verdict(False, REGRESSED_PREFIX + (f"{task}:" if named else "") + ",".join(items))
    lost = [task for task, task_delta in deltas.items() if task_delta < -max_task_loss]
    if named and lost:
        return verdict(False, TASK_REGRESSED_PREFIX + lost[0])
    if delta < min_gain or not all(gain_shown(c.comparison) for c in compared):
        return verdict(False, NO_IMPROVEMENT)
    return verdict(True, ACCEPTED)


def gain_shown(comparison: Comparison) -> bool:
    """The sequential rule's bound (core/sequential.py): with more than one pair, the smallest pair
    gain must be above 0 (the exact sign test); a comparison of one pair has no bound to meet."""
    return comparison.pairs is None or (comparison.gain_bound is not None and comparison.gain_bound > 0)


def order_seed(iteration_key: str) -> int:
    """A stable seed from the iteration's key: same key, same A/B order, on every machine.

    48 bits, so it survives JSON and Dagster metadata (int64) unchanged.
    """
    return int(hashlib.sha256(iteration_key.encode("utf-8")).hexdigest()[:12], 16)


def candidate_label(seed: int) -> Literal["A", "B"]:
    """Which side the judge sees the candidate as: even seeds show it first."""
    return "A" if seed % 2 == 0 else "B"
