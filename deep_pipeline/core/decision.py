"""The decision rule of one iteration (SPEC §6.5–§6.6) and the blind A/B order.

Regression list format: the judge's `runtime_regressions` (core/comparison.py: one item
per valid claim, `<kind> (<trace id> step <n>)`, or `<kind>` for a face-value claim that
named no trace), each stripped of outer whitespace with inner whitespace folded, empty
ones dropped, duplicates dropped (first kept), commas replaced by ';' (the list itself is
comma-joined); then `timeout` is appended when the candidate's timed-out share is higher
than the incumbent's and the judge did not already name it. The reason is
`runtime_regressed:` + the items joined by `,`, e.g.
`runtime_regressed:failed_command (section-i00-r1 step 3),timeout`.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from deep_pipeline.core.models import (
    ACCEPTED,
    NO_IMPROVEMENT,
    NOT_RELEVANT,
    REGRESSED_PREFIX,
    Comparison,
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
        item = " ".join(raw.split()).replace(",", ";")
        if len(item) > REGRESSION_CHARS:  # the reason stays one readable line; comparison.json keeps it whole
            item = item[: REGRESSION_CHARS - 1] + "…"
        if item and item not in items:
            items.append(item)
    items += [item for item in rule_regressions(incumbent_traces, candidate_traces) if item not in items]
    return items


def decide(
    comparison: Comparison,
    incumbent_traces: list[Trace],
    candidate_traces: list[Trace],
    min_gain: float,
) -> tuple[bool, str, float]:
    """(accepted, reason, delta): the first rule of SPEC §6.6 that applies."""
    # Means of up to 10 calls: rounding keeps a delta of exactly min_gain from reading 0.49999….
    delta = round(float(comparison.candidate_score - comparison.incumbent_score), 9)
    if not comparison.task_relevant:
        return False, NOT_RELEVANT, delta
    found = regressions(comparison, incumbent_traces, candidate_traces)
    if found:
        return False, REGRESSED_PREFIX + ",".join(found), delta
    if delta < min_gain:
        return False, NO_IMPROVEMENT, delta
    return True, ACCEPTED, delta


def order_seed(iteration_key: str) -> int:
    """A stable seed from the iteration's key: same key, same A/B order, on every machine.

    48 bits, so it survives JSON and Dagster metadata (int64) unchanged.
    """
    return int(hashlib.sha256(iteration_key.encode("utf-8")).hexdigest()[:12], 16)


def candidate_label(seed: int) -> Literal["A", "B"]:
    """Which side the judge sees the candidate as: even seeds show it first."""
    return "A" if seed % 2 == 0 else "B"
