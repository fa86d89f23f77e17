"""Task sets' pure core (SPEC §11): the set's rules, its identity, the per-task matrix cell
and the decision rule over per-task comparisons — and that a compile of one task keeps
today's identity, cells and decisions exactly."""

from __future__ import annotations

import hashlib
import json

import pytest

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.decision import decide, decide_tasks
from deep_pipeline.core.keys import compile_key
from deep_pipeline.core.matrix import mean_cell, mean_cells
from deep_pipeline.core.models import (
    ACCEPTED,
    NO_IMPROVEMENT,
    NOT_RELEVANT,
    Cell,
    Comparison,
    EvidenceRef,
    TaskComparison,
    Trace,
)
from deep_pipeline.core.tasks import (
    TaskEntry,
    TaskSet,
    TaskSetError,
    check_task_set,
    identity_fields,
    identity_payload,
    single_task,
    task_set_problems,
    trace_content_hash,
)
from deep_pipeline.engine.compiles import compile_identity

H = {name: hashlib.sha256(name.encode()).hexdigest() for name in ("a", "b", "c", "t1", "t2")}


def entry(task: str, bundle: str, split: str = "training", traces: tuple[str, ...] = ()) -> TaskEntry:
    return TaskEntry(task=task, bundle_hash=H[bundle], split=split, trace_hashes=[H[t] for t in traces])


# ---------------------------------------------------------------- the set's rules


def test_a_valid_set_passes() -> None:
    good = TaskSet(tasks=[entry("alpha", "a", traces=("t1",)), entry("beta", "b"),
                          entry("gamma", "c", "held_out", traces=("t2",))])
    assert task_set_problems(good) == [] and check_task_set(good) is good


@pytest.mark.parametrize(("tasks", "expected"), [
    ([entry("alpha", "a"), entry("alpha", "b")],
     "tasks[1] (training task 'alpha').task: duplicate task name (also tasks[0])"),
    ([entry("alpha", "a"), entry("beta", "a", "held_out")],
     f"tasks[1] (held_out task 'beta').bundle_hash: bundle {H['a'][:12]} is in both splits: a held-out task must "
     "not be trained on (also tasks[0] (training task 'alpha'))"),
    ([entry("alpha", "a"), entry("beta", "a")],
     f"tasks[1] (training task 'beta').bundle_hash: bundle {H['a'][:12]} is listed twice in the training split "
     "(also tasks[0] (training task 'alpha'))"),
    ([entry("beta", "b", "held_out")], "tasks: no training task; a task set needs at least one"),
    ([entry("alpha", "a", traces=("t1",)), entry("beta", "b", "held_out", traces=("t2", "t1"))],
     f"tasks[1] (held_out task 'beta').trace_hashes[1]: trace {H['t1'][:12]} is also in tasks[0] (training task "
     "'alpha'): held-out traces would leak into training"),
    ([entry("a:b", "a")], "tasks[0] (training task 'a:b').task: a task name must not be blank or hold ':', ',' "
     "or a line break (it is named in decision reasons)"),
])
def test_each_broken_rule_is_one_line_naming_the_task_and_field(tasks, expected) -> None:
    task_set = TaskSet(tasks=tasks)
    assert task_set_problems(task_set) == [expected]
    with pytest.raises(TaskSetError) as raised:
        check_task_set(task_set)
    assert str(raised.value) == expected and "\n" not in expected


def test_traces_shared_between_training_tasks_are_no_leak() -> None:
    assert task_set_problems(TaskSet(tasks=[entry("alpha", "a", traces=("t1",)), entry("beta", "b", traces=("t1",))])) == []


def test_a_trace_s_content_hash_ignores_its_labels_not_its_content() -> None:
    trace = Trace(trace_id="r0", batch="input", final_output="done")
    assert trace_content_hash(trace) == trace_content_hash(trace.model_copy(update={"trace_id": "x9", "batch": "b"}))
    assert trace_content_hash(trace) != trace_content_hash(trace.model_copy(update={"final_output": "done!"}))


# ---------------------------------------------------------------- identity


@pytest.mark.parametrize(("config", "pinned"), [
    # The identity hashes of a compile of one task as main computed them before task sets existed.
    (CompileConfig(), "8ca57f631948e14ec3264fe92613d1d49e5da348e25a772f83081d5582ffc8f6"),
    (CompileConfig(min_gain=1.0, rollouts=2), "7ebf0d233d1440a6a3588fd0a53b1c466b3a730befd1b7a00f1eacbd67cd02a9"),
])
def test_a_set_of_one_training_task_keeps_today_s_compile_identity(config, pinned) -> None:
    package, bundle = "p" * 64, "b" * 64
    payload = identity_payload(package, single_task("status-update", bundle), config.identity_settings())
    ours = hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()
    assert ours == compile_identity(package, bundle, config) == pinned
    assert compile_key("demo-skill", ours) == f"demo-skill-{pinned[:6]}"


def test_a_set_s_identity_is_each_split_as_a_sorted_list_of_bundle_hashes() -> None:
    one = TaskSet(tasks=[entry("beta", "b"), entry("alpha", "a"), entry("gamma", "c", "held_out")])
    other = TaskSet(tasks=[entry("alpha", "a"), entry("gamma", "c", "held_out"), entry("beta", "b")])
    assert identity_fields(one) == identity_fields(other) == {"training": sorted([H["a"], H["b"]]), "held_out": [H["c"]]}
    # Holding a task out is not training on it: another identity.
    assert identity_fields(TaskSet(tasks=[entry("alpha", "a"), entry("gamma", "c")])) != identity_fields(
        TaskSet(tasks=[entry("alpha", "a"), entry("gamma", "c", "held_out")]))
    # One training task with a held-out one is a set, not today's compile of one task.
    assert "bundle" not in identity_fields(TaskSet(tasks=[entry("alpha", "a"), entry("gamma", "c", "held_out")]))


def test_max_task_loss_enters_the_identity_only_when_set() -> None:
    assert "max_task_loss" not in CompileConfig().identity_settings()
    assert CompileConfig(max_task_loss=0.5).identity_settings() == CompileConfig().identity_settings()
    assert CompileConfig(max_task_loss=1.0).identity_settings()["max_task_loss"] == 1.0
    with pytest.raises(ValueError):
        CompileConfig(max_task_loss=-0.1)


# ---------------------------------------------------------------- the per-task cell


def cell(score, reason="", trace="t", unit="s01", dimension="clarity") -> Cell:
    return Cell(unit_id=unit, dimension=dimension, score=score, reason=reason,
                evidence=[EvidenceRef(trace_id=trace, step=1, quote="q")], dropped_evidence=1)


def test_one_task_s_cell_is_the_level_s_cell_unchanged() -> None:
    own = cell(2, "vague")
    assert mean_cell({"alpha": own}).cell == own


def test_the_level_s_cell_is_the_mean_over_the_tasks_and_keeps_every_task_s_cell() -> None:
    per_task = {"alpha": cell(2, "vague", "alpha-r0"), "beta": cell(3, "ok", "beta-r0"), "gamma": cell(3, "", "g-r0")}
    result = mean_cell(per_task)
    assert result.cell.score == 2.6667 and result.cell.gap == pytest.approx((5 - 2.6667) / 4)
    assert result.cell.reason == "alpha: vague | beta: ok"
    assert [ref.trace_id for ref in result.cell.evidence] == ["alpha-r0", "beta-r0", "g-r0"]
    assert result.cell.dropped_evidence == 3 and result.per_task == per_task


def test_cells_of_every_task_must_cover_the_same_coordinates() -> None:
    columns = {"alpha": [cell(2), cell(4, unit="s02")], "beta": [cell(4, unit="s02"), cell(4)]}
    assert [c.cell.score for c in mean_cells(columns)] == [3, 4]
    with pytest.raises(ValueError, match="task 'beta': no cell for s02/clarity"):
        mean_cells({"alpha": [cell(2), cell(4, unit="s02")], "beta": [cell(4)]})
    with pytest.raises(ValueError, match="task 'beta': cells for coordinates the other tasks lack: s03/clarity"):
        mean_cells({"alpha": [cell(2)], "beta": [cell(4), cell(4, unit="s03")]})


# ---------------------------------------------------------------- the decision over tasks


def compared(task: str, incumbent=3, candidate=4, relevant=True, regressions=(), timed_out=0) -> TaskComparison:
    comparison = Comparison(incumbent_score=incumbent, candidate_score=candidate, task_relevant=relevant,
                            runtime_regressions=list(regressions))
    candidate_traces = [Trace(trace_id=f"{task}-c{i}", timed_out=i < timed_out) for i in range(3)]
    return TaskComparison(task=task, comparison=comparison, incumbent_traces=[Trace(trace_id=f"{task}-i0")],
                          candidate_traces=candidate_traces)


def test_an_edit_that_helps_one_task_and_hurts_another_is_rejected_naming_the_hurt_task() -> None:
    # Mean delta (+2 - 1) / 2 = 0.5 would pass min_gain: the per-task loss rule stops it.
    verdict = decide_tasks([compared("alpha", 2, 4), compared("beta", 4, 3)], min_gain=0.5, max_task_loss=0.5)
    assert (verdict.accepted, verdict.reason, verdict.delta) == (False, "task_regressed:beta", 0.5)
    assert verdict.task_deltas == {"alpha": 2.0, "beta": -1.0}


def test_an_edit_that_helps_both_tasks_is_accepted_with_every_delta_recorded() -> None:
    verdict = decide_tasks([compared("alpha", 2, 4), compared("beta", 3, 4)], min_gain=0.5, max_task_loss=0.5)
    assert (verdict.accepted, verdict.reason, verdict.delta) == (True, ACCEPTED, 1.5)
    assert verdict.task_deltas == {"alpha": 2.0, "beta": 1.0}


def test_a_loss_within_max_task_loss_is_tolerated_when_the_mean_gains() -> None:
    verdict = decide_tasks([compared("alpha", 2, 4), compared("beta", 4, 3.5)], min_gain=0.5, max_task_loss=0.5)
    assert verdict.accepted and verdict.task_deltas["beta"] == -0.5


def test_a_regression_on_one_task_rejects_naming_that_task() -> None:
    verdict = decide_tasks([compared("alpha", 2, 5), compared("beta", 2, 5, timed_out=1)], 0.5, 0.5)
    assert (verdict.accepted, verdict.reason) == (False, "runtime_regressed:beta:timeout")
    judged = decide_tasks([compared("alpha", 2, 5, regressions=["error (alpha-c1 step 2)"]), compared("beta", 2, 5)],
                          0.5, 0.5)
    assert judged.reason == "runtime_regressed:alpha:error (alpha-c1 step 2)"
    assert judged.task_regressions == {"alpha": ["error (alpha-c1 step 2)"]}


def test_not_relevant_only_when_no_task_finds_the_unit_relevant() -> None:
    assert decide_tasks([compared("alpha", relevant=False), compared("beta", relevant=False, timed_out=2)],
                        0.5, 0.5).reason == NOT_RELEVANT
    assert decide_tasks([compared("alpha", relevant=False), compared("beta", 2, 4)], 0.5, 0.5).accepted


def test_a_small_mean_gain_is_no_improvement() -> None:
    verdict = decide_tasks([compared("alpha", 3, 3.5), compared("beta", 3, 3)], 0.5, 0.5)
    assert (verdict.accepted, verdict.reason, verdict.delta) == (False, NO_IMPROVEMENT, 0.25)


@pytest.mark.parametrize(("incumbent", "candidate", "relevant", "regressions", "timed_out"), [
    (2, 4, True, (), 0), (3, 1, True, (), 0), (3, 3.5, True, (), 0), (2, 5, True, ("slower, louder",), 0),
    (2, 5, True, (), 2), (2, 5, False, ("x",), 2), (4, 1, True, (), 0),
])
def test_one_task_decides_exactly_as_a_compile_of_one_task_did(incumbent, candidate, relevant, regressions,
                                                                timed_out) -> None:
    one = compared("only", incumbent, candidate, relevant, regressions, timed_out)
    verdict = decide_tasks([one], min_gain=0.5, max_task_loss=0.5)
    today = decide(one.comparison, one.incumbent_traces, one.candidate_traces, 0.5)
    assert (verdict.accepted, verdict.reason, verdict.delta) == today
    assert "only" not in verdict.reason  # a compile of one task never names it
    if candidate - incumbent < -0.5 and relevant and not regressions and not timed_out:
        assert verdict.reason == NO_IMPROVEMENT  # not task_regressed: §6.6's reason


def test_the_pre_task_set_reasons_are_unchanged() -> None:
    traces = [Trace(trace_id="t0")]
    regressed = Comparison(incumbent_score=2, candidate_score=5, task_relevant=True,
                           runtime_regressions=["failed_command (section-i00-r1 step 3)"])
    assert decide(regressed, traces, [Trace(trace_id="c0", timed_out=True)], 0.5) == (
        False, "runtime_regressed:failed_command (section-i00-r1 step 3),timeout", 3.0)
