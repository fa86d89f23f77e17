"""The held-out judged comparison's call (SPEC §11): two whole packages' traces, compared blind.

After the compile, S_fast and S_final are rolled out on a held-out task; each call shows
the judge the task and the two packages' traces as versions A and B under neutral trace
labels (A1, A2, … / B1, …), as the comparator does (llm/comparator.py), and asks which
version's traces do the task better, or a tie. Nothing of the skills' texts is shown.
The answer is mapped back to S_final's outcome (win, tie, loss) before it leaves here;
core/winrate.py turns the outcomes into a rate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from deep_pipeline.core.comparison import Label, other, unblind
from deep_pipeline.core.models import Trace
from deep_pipeline.core.winrate import Outcome
from deep_pipeline.llm.accounting import CallRecord
from deep_pipeline.llm.client import ModelClient
from deep_pipeline.llm.comparator import blind_labels
from deep_pipeline.llm.prompts import fill, profile
from deep_pipeline.llm.render import fence_data, render_traces
from deep_pipeline.llm.schemas import DEFAULT_LIMITS, AnswerLimits

_STRICT = ConfigDict(extra="forbid")


def package_answer_model(limits: AnswerLimits = DEFAULT_LIMITS) -> type[BaseModel]:
    """{reason, better}: the reason first, so a model reasons before it chooses."""
    return create_model(
        "PackageCompareAnswer",
        __config__=_STRICT,
        reason=(str, Field(max_length=limits.reason_chars)),
        better=(Literal["A", "B", "tie"], ...),
    )


class PackageVerdict(BaseModel):
    """One judge call's answer, unblinded: which side S_final was shown as, and its outcome."""

    model_config = ConfigDict(extra="forbid")

    final_label: Label  # the side S_final was shown as in this call
    better: Literal["A", "B", "tie"]  # as the judge answered
    outcome: Outcome  # S_final's
    reason: str  # with trace labels as trace ids and sides named S_final / S_fast


def outcome_of(better: str, final_label: Label) -> Outcome:
    if better == "tie":
        return "tie"
    return "win" if better == final_label else "loss"


def package_messages(client, *, task_prompt: str, fast_traces: list[Trace], final_traces: list[Trace],
                     final_label: Label) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """One call's messages, and each side's trace id -> blind label."""
    _, render = profile(client)
    sides = {final_label: final_traces, other(final_label): fast_traces}
    labels = {side: blind_labels(traces, side) for side, traces in sides.items()}
    user = fill(
        "package_compare_user",
        task=task_prompt,
        traces_a=fence_data(render_traces(sides["A"], render, labels["A"]), "the agent's traces with version A"),
        traces_b=fence_data(render_traces(sides["B"], render, labels["B"]), "the agent's traces with version B"),
    )
    return [{"role": "system", "content": fill("package_compare_system")}, {"role": "user", "content": user}], labels


def judge_packages(client: ModelClient, *, step_key: str, task_prompt: str, fast_traces: list[Trace],
                   final_traces: list[Trace], final_label: Label) -> tuple[PackageVerdict, list[CallRecord]]:
    """One blind call with S_final shown as `final_label`; cached under `step_key` and the messages."""
    limits, _ = profile(client)
    messages, labels = package_messages(client, task_prompt=task_prompt, fast_traces=fast_traces,
                                        final_traces=final_traces, final_label=final_label)
    answer, calls = client.structured(step_key, messages, package_answer_model(limits))
    back = {label: trace_id for side in labels.values() for trace_id, label in side.items()}
    reason = unblind(answer.reason, back, final_label)
    reason = reason.replace("the candidate", "S_final").replace("the incumbent", "S_fast")
    verdict = PackageVerdict(final_label=final_label, better=answer.better,
                             outcome=outcome_of(answer.better, final_label), reason=reason)
    return verdict, calls
