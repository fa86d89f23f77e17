"""The blind comparison of one cell, incumbent against candidate (SPEC §6.5).

Each call shows the judge the two versions as A and B (the candidate is that call's
`candidate_label`), each with its own traces under neutral labels (A1, A2, … / B1, …),
so neither the order nor the trace ids tell which version is new. Every answer is
mapped back to incumbent and candidate, and its labels to trace ids, before it leaves
this module; core/comparison.py turns the calls into one verdict. With both orders and
`compare_max_pairs` > 1, pairs of calls are asked while core/sequential.py says the verdict is
unsure, each later pair showing the traces re-presented (another order, fresh labels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from deep_pipeline.core import sequential
from deep_pipeline.core.comparison import call_orders, check_claims, combine, other, unblind
from deep_pipeline.core.config import Dimension
from deep_pipeline.core.keys import compare_call_key
from deep_pipeline.core.models import CompareCall, Comparison, Trace, Unit
from deep_pipeline.llm.accounting import CallRecord
from deep_pipeline.llm.client import ModelClient
from deep_pipeline.llm.judge import checked_evidence
from deep_pipeline.llm.prompts import fill, profile, rubric_text
from deep_pipeline.llm.render import fence_data, render_traces
from deep_pipeline.llm.schemas import compare_answer_model


def blind_labels(traces: list[Trace], side: str, first: int = 1) -> dict[str, str]:
    """Trace id -> neutral label shown to the judge, numbered from `first` in the order shown."""
    return {trace.trace_id: f"{side}{index}" for index, trace in enumerate(traces, start=first)}


def compare_cell(
    client: ModelClient,
    *,
    iteration_key: str,
    order_seed: int,
    orders: int = 2,
    samples: int = 1,
    need_evidence: bool = True,
    parallel: int = 1,
    max_pairs: int = 1,
    min_gain: float = 0.5,
    panel: Sequence[ModelClient] | None = None,
    **cell,
) -> tuple[Comparison, list[CallRecord]]:
    """Every call `orders` x `samples` asks, up to `parallel` in flight together, then their verdict.

    `cell` is what each call shows, as `compare_once` names it: task_prompt, unit,
    old_text, new_text, dimension, incumbent_traces, candidate_traces. One order and one
    sample is the original single call under its original cache key; with more, each
    call's key names its order and sample, so a resume repeats none. The calls are
    independent, so they are sent together; the verdict and the records keep the plan's
    order whatever order the answers came in. The client's budget reserves each call before
    it is sent, so calls in flight together never overshoot it (llm/budget.py).

    When core/sequential.py's rule applies (both orders, `max_pairs` > 1), that plan is one
    pair: after each, the rule stops or asks pair k, whose calls have keys of their own
    (`.../compare/p<k>/...`) and show the traces re-presented. A resume finds every answered
    pair in the cache, so the same pairs are asked again and none is sent twice.

    A judge `panel` (core/panel.py: clients of `compare_models`, sharing the judge's cache, budget
    and cap) answers pair k with its model k mod n, each call keyed and recorded with its model.
    """
    plan = call_orders(orders, samples, order_seed)
    single = len(plan) == 1

    def judge_of(pair: int) -> ModelClient:
        return panel[pair % len(panel)] if panel else client

    def asker(pair: int):
        model = judge_of(pair).settings.model if panel else None

        def ask(client_: ModelClient, label: Literal["A", "B"], sample: int) -> tuple[CompareCall, list[CallRecord]]:
            key = (compare_call_key(iteration_key, model=model) if single else
                   compare_call_key(iteration_key, label, sample, pair, model))
            return compare_once(client_, step_key=key, candidate_label=label, sample=sample, pair=pair,
                                order_seed=order_seed, need_evidence=need_evidence, model=model, **cell)
        return ask

    def ask_pair(pair: int) -> list:
        if single or parallel <= 1:
            return [asker(pair)(judge_of(pair), label, sample) for label, sample in plan]
        return _ask_together(judge_of(pair), plan, parallel, asker(pair))

    answers = ask_pair(0)
    stop, more = None, []
    if sequential.applies(orders, max_pairs):
        while (step := sequential.next_pair([call for call, _ in answers], min_gain=min_gain, max_pairs=max_pairs,
                                            panel=len(panel or [client]))).stop is None:
            more.append(step.more)
            answers += ask_pair(len(more))
        stop = step.stop
    made = [call for call, _ in answers]
    records = [record for _, calls in answers for record in calls]
    return combine(made, order_seed, stop, more), records


def _ask_together(client: ModelClient, plan: list, parallel: int, ask) -> list:
    """`ask` for every (label, sample) of `plan` on up to `parallel` threads, answers in plan order.

    Every call is waited for, so an answer that came is cached and logged before the step
    fails; a failed call stops the others' resends (ModelClient.stop). A step failure wins
    over a spent budget (the step is then retried, as it would be had the failed call been
    sent first) and over a call it stopped; among equals, the first in plan order is raised.
    """
    from concurrent.futures import ThreadPoolExecutor, wait

    from deep_pipeline.llm.budget import BudgetExhausted
    from deep_pipeline.llm.client import StoppedByFailure

    view = client.stoppable()

    def one(label, sample):
        try:
            return ask(view, label, sample)
        except BudgetExhausted:
            raise
        except BaseException:
            view.stop()
            raise

    with ThreadPoolExecutor(max_workers=min(parallel, len(plan)), thread_name_prefix="compare") as pool:
        futures = [pool.submit(one, label, sample) for label, sample in plan]
        wait(futures)
    failures = [f.exception() for f in futures if f.exception() is not None]
    if failures:
        # The call that failed, not one it stopped (StoppedByFailure) nor a spent budget.
        ranked = sorted(failures, key=lambda e: (isinstance(e, BudgetExhausted), isinstance(e, StoppedByFailure)))
        raise ranked[0]
    return [f.result() for f in futures]


def compare_messages(
    client,
    *,
    task_prompt: str,
    unit: Unit,
    old_text: str,
    new_text: str,
    dimension: Dimension,
    incumbent_traces: list[Trace],
    candidate_traces: list[Trace],
    candidate_label: Literal["A", "B"],
    pair: int = 0,
    order_seed: int = 0,
) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """One comparison call's messages, and each side's trace id -> blind label.

    A later pair of a sequential comparison (`pair` > 0) shows each version's traces in its
    own seeded order under fresh labels (core/sequential.py); the unit texts stay as they are.
    """
    _, render = profile(client)
    shown = {version: [traces[i] for i in sequential.presentation(len(traces), order_seed, pair, version)]
             for version, traces in (("candidate", candidate_traces), ("incumbent", incumbent_traces))}
    sides = {candidate_label: (new_text, shown["candidate"]), other(candidate_label): (old_text, shown["incumbent"])}
    labels = {side: blind_labels(traces, side, sequential.first_label(len(traces), pair))
              for side, (_, traces) in sides.items()}
    user = fill(
        "compare_user",
        task=task_prompt,
        dimension=dimension.name,
        description=dimension.description,
        rubric=rubric_text(dimension),
        unit_id=unit.unit_id,
        text_a=sides["A"][0],
        text_b=sides["B"][0],
        traces_a=fence_data(render_traces(sides["A"][1], render, labels["A"]), "the agent's traces with version A"),
        traces_b=fence_data(render_traces(sides["B"][1], render, labels["B"]), "the agent's traces with version B"),
    )
    return [{"role": "system", "content": fill("compare_system")}, {"role": "user", "content": user}], labels


def compare_once(
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
    sample: int = 0,
    need_evidence: bool = True,
    pair: int = 0,
    order_seed: int = 0,
    model: str | None = None,
) -> tuple[CompareCall, list[CallRecord]]:
    """One judge call; `model`: the panel model `client` asks, recorded with the call (None: no panel)."""
    limits, _ = profile(client)
    incumbent_label = other(candidate_label)
    messages, labels = compare_messages(
        client, task_prompt=task_prompt, unit=unit, old_text=old_text, new_text=new_text, dimension=dimension,
        incumbent_traces=incumbent_traces, candidate_traces=candidate_traces, candidate_label=candidate_label,
        pair=pair, order_seed=order_seed)
    answer, calls = client.structured(step_key, messages, compare_answer_model(limits))

    back = {label: trace_id for side in labels.values() for trace_id, label in side.items()}
    new, old = candidate_label.lower(), incumbent_label.lower()
    cand_evidence, dropped_c = checked_evidence(getattr(answer, f"evidence_{new}"), candidate_traces, rename=back)
    inc_evidence, _ = checked_evidence(getattr(answer, f"evidence_{old}"), incumbent_traces, rename=back)
    # Each side's claims are checked against that side's traces only: a quote from the
    # incumbent's trace is no evidence against the candidate.
    cand_claims, dropped_rc = check_claims(getattr(answer, f"regressions_{new}"), candidate_traces, back, need_evidence)
    inc_claims, dropped_ri = check_claims(getattr(answer, f"regressions_{old}"), incumbent_traces, back, need_evidence)
    call = CompareCall(
        candidate_label=candidate_label,
        pair=pair,
        model=model,
        sample=sample,
        incumbent_score=getattr(answer, f"score_{old}"),
        candidate_score=getattr(answer, f"score_{new}"),
        task_relevant=answer.task_relevant,
        reason=unblind(answer.reason, back, candidate_label),
        candidate_evidence=cand_evidence,
        incumbent_evidence=inc_evidence,
        dropped_evidence=dropped_c,  # the candidate's, as a cell counts them
        candidate_regressions=cand_claims,
        incumbent_regressions=inc_claims,
        dropped_regressions=dropped_rc + dropped_ri,
    )
    return call, calls
