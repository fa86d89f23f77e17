"""engine/steps.py: the step table, the one "is this next?" check, and what an iteration records."""

from __future__ import annotations

import pytest

from deep_pipeline.defs.partitions import PARTITION_SET
from deep_pipeline.core.keys import iteration_key, matrix_key
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.iteration_steps import Iteration, decision_step
from deep_pipeline.engine.records import ComparisonRecord, EditRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import Step, run_steps, next_step, run_step
from deep_pipeline.errors import StepError
from tests.compile_world import CONFIG, World, install_world, make_inputs

# One accept on the first matrix, then a refresh: iterations select from two matrices.
WORLD = dict(low={("s02-steps", "clarity"): 2, ("s03-output", "concision"): 3},
             compare={("s03-output", "concision"): (3, 3)})


def registered(tmp_path, scripted_llm) -> CompileHandle:
    install_world(scripted_llm, World(**WORLD))
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    return CompileHandle.open(tmp_path / "store", record.key)


def test_the_loop_runs_the_table_in_pipeline_order_and_each_iteration_records_its_matrix(tmp_path, scripted_llm):
    ctx = registered(tmp_path, scripted_llm)
    seen: list[Step] = []

    def execute(ctx: CompileHandle, step: Step) -> None:
        seen.append(step)
        run_step(ctx, step)

    report = run_steps(ctx, execute)
    key = ctx.cdir.key
    kinds = [s.kind for s in seen]
    assert kinds[:2] == ["inputs", "matrix"] and kinds[-1] == "finalize"
    assert [PARTITION_SET[s.kind] for s in seen[:3]] == ["compiles", "matrices", "iterations"]
    assert len({s.run_key for s in seen}) == len(seen)  # one run key per step, never reused
    iterations = [s for s in seen if s.kind == "iteration"]
    assert len(iterations) == len(report.decisions)
    for step in iterations:
        edit = Iteration(ctx, step.action.level, step.action.index).load("edit.json", EditRecord)
        assert step.partition_key == iteration_key(key, step.action.level, step.action.index)
    # After the first accept the level refreshes: later iterations select from m01, not m00.
    selected_from = [Iteration(ctx, s.action.level, s.action.index).load("edit.json", EditRecord).matrix_key
                     for s in iterations]
    assert selected_from[0] == matrix_key(key, "section", 0)
    assert selected_from[-1] == matrix_key(key, "section", 1)
    assert next_step(ctx) is None


def test_a_step_that_is_not_the_next_is_refused_naming_what_the_policy_asks_for(tmp_path, scripted_llm):
    ctx = registered(tmp_path, scripted_llm)
    run_step(ctx, next_step(ctx))  # inputs
    ahead = next_step(ctx)
    assert ahead.kind == "matrix"
    early = Step("iteration", iteration_key(ctx.cdir.key, "section", 0), ahead.action)
    with pytest.raises(StepError, match=r"section/i00: not the compile's next step \(the policy asks for score section m00"):
        run_step(ctx, early)
    assert not ctx.cdir.iteration_dir("section", 0).exists()


def test_the_decision_step_returns_the_matrix_as_the_policy_sees_it_after_the_decision(tmp_path, scripted_llm):
    ctx = registered(tmp_path, scripted_llm)
    while (step := next_step(ctx)).kind != "iteration":
        run_step(ctx, step)
    run_step(ctx, step)  # the first iteration: an accept, so its cell changes in the matrix
    it = Iteration(ctx, step.action.level, step.action.index)
    record, matrix_after = decision_step(it, it.load("edit.json", EditRecord), it.load("comparison.json", ComparisonRecord))
    assert record.decision.accepted
    assert matrix_after == ctx.look().state.current_matrix
    cell = matrix_after.cell(record.decision.coordinate)
    assert cell.score == record.decision.candidate_score != it.load("edit.json", EditRecord).cell.score
