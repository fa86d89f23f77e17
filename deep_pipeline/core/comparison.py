"""The comparison of one cell over several judge calls (SPEC §6.5).

Which calls are asked (`call_orders`), how a call's regression claims are checked
(`check_claims`), how a call's free text loses its blind labels (`unblind`), and how
the calls become one verdict (`combine`). The judge call itself is llm/comparator.py's.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from deep_pipeline.core.decision import candidate_label, claim_item
from deep_pipeline.core.evidence import is_valid
from deep_pipeline.core.pairs import MoreReason, PairStop
from deep_pipeline.core.sequential import pair_facts
from deep_pipeline.core.models import (
    REGRESSION_KINDS,
    CompareCall,
    Comparison,
    EvidenceRef,
    RegressionClaim,
    Trace,
)

Label = Literal["A", "B"]
MEAN_DIGITS = 4  # a mean of at most 10 integer scores; 4 digits tell every such mean apart


def other(label: Label) -> Label:
    return "B" if label == "A" else "A"


def call_orders(orders: int, samples: int, seed: int) -> list[tuple[Label, int]]:
    """(candidate label, sample index) of every call, the seeded order first.

    With one order this is the original design's single call in the seeded order; with
    two the judge also sees the candidate on the other side, which cancels a preference
    for a position (SPEC §6.5).
    """
    first = candidate_label(seed)
    labels = [first] if orders == 1 else [first, other(first)]
    return [(label, sample) for label in labels for sample in range(samples)]


def mean_score(values: list[int]) -> int | float:
    """The mean, an int when it is one (a single call's record reads as before)."""
    mean = round(sum(values) / len(values), MEAN_DIGITS)
    return int(mean) if mean == int(mean) else mean


def check_claims(
    items: list[Any], traces: list[Trace], rename: dict[str, str], need_evidence: bool = True
) -> tuple[list[RegressionClaim], int]:
    """(kept claims, dropped count) for one side's regression claims as the judge wrote them.

    A claim is valid like cell evidence (SPEC §3): its trace (a blind label, renamed to
    the trace id) and step exist on this side and the quote is in that step. Without
    `need_evidence`, every claim of a known kind counts at face value (the original
    design); its trace id is kept only when it names a trace of this side, and a claim
    whose evidence is not valid is kept with `verified` false.
    """
    by_id = {trace.trace_id: trace for trace in traces}
    kept: list[RegressionClaim] = []
    dropped = 0
    for item in items:
        claim = _as_claim(item, rename)
        if claim is None:
            dropped += 1
            continue
        ref = EvidenceRef(trace_id=claim.trace_id, step=claim.step, quote=claim.quote)
        if is_valid(ref, by_id):
            kept.append(claim)
        elif need_evidence:
            dropped += 1
        else:  # at face value, marked so: an auditor tells it from a claim the traces bear out
            where = {} if claim.trace_id in by_id else {"trace_id": "", "step": 0}
            kept.append(claim.model_copy(update={**where, "verified": False}))
    return kept, dropped


def _as_claim(item: Any, rename: dict[str, str]) -> RegressionClaim | None:
    """The claim in an answer's item, or None when it is not one (dropped and counted)."""
    if isinstance(item, str):  # a bare description: a claim with no place, so no evidence
        return RegressionClaim(kind="other", quote=item.strip()) if item.strip() else None
    if not isinstance(item, dict) or item.get("kind") not in REGRESSION_KINDS:
        return None
    step = item.get("step")
    trace_id, quote = item.get("trace_id"), item.get("quote")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        step = 0
    trace_id = rename.get(trace_id, trace_id) if isinstance(trace_id, str) else ""
    return RegressionClaim(kind=item["kind"], trace_id=trace_id, step=step, quote=quote if isinstance(quote, str) else "")


_TRACE_LABEL = re.compile(r"\b([AB]\d+)\b")
_SIDE = re.compile(r"\b(?:[Vv]ersion|[Ss]ide)\s+([AB])\b|\b([AB])(?='s\b|\s+(?:is|was|has|had|does|did|shows|gives|scores|keeps|adds|makes)\b)|\b([AB])\b(?=\s*[,.;:)]|\s*$)")


def unblind(text: str, labels: dict[str, str], label: Label) -> str:
    """The judge's free text with trace labels (A2) as trace ids and sides (version B) named.

    `labels` maps blind trace labels to trace ids; `label` is the candidate's side.
    A reason is shown to people and fed to the editor: it must never read "A2 step 5".
    """
    text = _TRACE_LABEL.sub(lambda m: labels.get(m.group(1), m.group(1)), text)

    def side(match: re.Match) -> str:
        which = next(g for g in match.groups() if g)
        return "the candidate" if which == label else "the incumbent"

    return _SIDE.sub(side, text)


def order_disagreement(calls: list[CompareCall]) -> bool | None:
    """Did the two orders disagree on which side is better? None with one order only."""
    by_order: dict[str, list[int]] = {}
    for call in calls:
        by_order.setdefault(call.candidate_label, []).append(call.delta)
    if len(by_order) < 2:
        return None
    signs = {_sign(sum(deltas)) for deltas in by_order.values()}
    return len(signs) > 1


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def combine(calls: list[CompareCall], order_seed: int, stop: PairStop | None = None,
            more: list[MoreReason] = ()) -> Comparison:
    """One verdict from every call (SPEC §6.5): mean scores, the union of the valid
    regressions, task-relevant unless every call says not; with more than one pair asked,
    the pairs, their bound and why they stopped (`stop`) and went on (`more`, core/sequential.py)."""
    found: dict[tuple[str, str, int], RegressionClaim] = {}
    for claim in (c for call in calls for c in call.candidate_regressions):
        place = (claim.kind, claim.trace_id, claim.step)
        if place not in found or (claim.verified and not found[place].verified):  # one call's valid quote verifies it
            found[place] = claim
    claims = list(found.values())
    evidence: list[EvidenceRef] = []
    for call in calls:
        evidence += [ref for ref in call.candidate_evidence if ref not in evidence]
    items = list(dict.fromkeys(claim_item(c) for c in claims))
    first = calls[0]
    return Comparison(
        incumbent_score=mean_score([c.incumbent_score for c in calls]),
        candidate_score=mean_score([c.candidate_score for c in calls]),
        task_relevant=any(c.task_relevant for c in calls),
        runtime_regressions=items,
        regressions=claims,
        dropped_regressions=sum(c.dropped_regressions for c in calls),
        candidate_evidence=evidence,
        dropped_evidence=sum(c.dropped_evidence for c in calls),
        reason=first.reason if len(calls) == 1 else _joined_reasons(calls),
        candidate_label=first.candidate_label,
        order_seed=order_seed,
        calls=calls,
        order_disagreement=order_disagreement(calls),
        **(pair_facts(calls, stop, list(more)) if stop is not None else {}),
    )


def _joined_reasons(calls: list[CompareCall]) -> str:
    """Each call's reason once, in call order: what a person reads to see why the scores split."""
    return " | ".join(dict.fromkeys(c.reason for c in calls if c.reason))


def summary_comparison(per_task: dict[str, Comparison]) -> Comparison:
    """A task set's comparison for people (SPEC §11): the mean scores, every task's calls,
    claims and evidence, each reason and regression named by its task. The decision reads
    the per-task comparisons, never this summary. Of their pairs it keeps the most any task
    asked and the smallest bound (each task's stop reason is in its own comparison)."""
    if not per_task:
        raise ValueError("a summary needs at least one task's comparison")
    items = list(per_task.items())
    first = items[0][1]
    orders = [c.order_disagreement for _, c in items if c.order_disagreement is not None]
    return Comparison(
        incumbent_score=mean_score([c.incumbent_score for _, c in items]),
        candidate_score=mean_score([c.candidate_score for _, c in items]),
        task_relevant=any(c.task_relevant for _, c in items),
        runtime_regressions=[f"{task}: {item}" for task, c in items for item in c.runtime_regressions],
        regressions=[claim for _, c in items for claim in c.regressions],
        dropped_regressions=sum(c.dropped_regressions for _, c in items),
        candidate_evidence=[ref for _, c in items for ref in c.candidate_evidence],
        dropped_evidence=sum(c.dropped_evidence for _, c in items),
        reason=" | ".join(f"{task}: {c.reason}" for task, c in items if c.reason),
        candidate_label=first.candidate_label,
        order_seed=first.order_seed,
        calls=[call for _, c in items for call in c.calls],
        order_disagreement=any(orders) if orders else None,
        pairs=max((c.pairs for _, c in items if c.pairs), default=None),
        gain_bound=min((c.gain_bound for _, c in items if c.gain_bound is not None), default=None),
    )
