"""The cost bound before the run (SPEC §11, core/estimate.py): it holds on every policy
scenario and on real scripted compiles, and it scales with the training tasks."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.estimate import RolePrice, estimate, estimate_cost, level_bounds
from deep_pipeline.core.models import Decision, ScoreMatrix
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_step, run_steps
from deep_pipeline.llm.accounting import read_calls
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.policy_scenarios import SCENARIOS, run


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_no_policy_scenario_scores_or_iterates_more_than_the_bound(scenario) -> None:
    world, history = run(scenario)
    matrices = Counter(e.level for e in history.events if isinstance(e, ScoreMatrix))
    iterations = Counter(e.level for e in history.events if isinstance(e, Decision))
    most_matrices, most_iterations = level_bounds(world.config)
    for level in ("section", "paragraph"):
        assert matrices[level] <= most_matrices[level], (level, matrices)
        assert iterations[level] <= most_iterations[level], (level, iterations)


@pytest.mark.parametrize("paragraph_iterations", [0, 1])
def test_the_paragraph_matrix_bound_is_reached(paragraph_iterations) -> None:
    """A paragraph start with nothing open in its dimension refreshes before any decision:
    1 + paragraph_iterations is not loose by one there."""
    scenario = next(s for s in SCENARIOS if s.name.startswith("exact duplicate edit"))
    world, history = run(dataclasses.replace(scenario, config={"paragraph_iterations": paragraph_iterations}))
    paragraph = sum(1 for e in history.events if isinstance(e, ScoreMatrix) and e.level == "paragraph")
    assert paragraph == level_bounds(world.config)[0]["paragraph"] == 1 + paragraph_iterations


def test_the_bound_scales_with_the_training_tasks_and_stops_at_max_calls() -> None:
    config = CompileConfig(runner="chat")
    one, three = estimate(config, 1), estimate(config, 3)
    # section 1 + 6 matrices, paragraph 1 + 3; 9 iterations; 5 dimensions.
    assert one.matrices == {"section": 7, "paragraph": 4} and one.iterations == {"section": 6, "paragraph": 3}
    # compare: 9 iterations x 2 orders x 1 sample x up to 3 pairs (the sequential rule, core/sequential.py)
    assert one.calls_by_kind == {"column": 55, "edit": 27, "compare": 54, "agent": 30}
    assert estimate(config.model_copy(update={"compare_max_pairs": 1})).calls_by_kind["compare"] == 18
    assert estimate(config.model_copy(update={"compare_orders": 1})).calls_by_kind["compare"] == 9  # one call, no pairs
    assert one.rollouts == {"input": 3, "candidate": 27} and one.total_rollouts == 30
    assert three.calls_by_kind == {"column": 165, "edit": 27, "compare": 162, "agent": 90}  # the editor is per iteration
    assert estimate(config, 1, answer_attempts=3, sends_per_answer=5).calls_by_kind["column"] == 55 * 15
    capped = estimate(config.model_copy(update={"max_calls": 40}), 3)
    assert (capped.calls, capped.capped) == (40, True)
    assert estimate(CompileConfig(runner="replay")).calls_by_kind["agent"] == 0


def test_no_paragraph_level_without_enough_section_iterations_to_exhaust_a_coordinate() -> None:
    assert level_bounds(CompileConfig(section_iterations=1, rejection_limit=2)) == (
        {"section": 2, "paragraph": 0}, {"section": 1, "paragraph": 0})
    assert level_bounds(CompileConfig(section_iterations=0)) == ({"section": 1, "paragraph": 0},
                                                                 {"section": 0, "paragraph": 0})


def test_the_cost_is_unknown_when_a_role_has_no_price() -> None:
    config = CompileConfig(runner="replay", judge_max_tokens=100, editor_max_tokens=200)
    bound = estimate(config)
    price = RolePrice(input_per_token=1e-6, output_per_token=2e-6)
    priced = estimate_cost(bound, config, {"column": 1000, "edit": 500, "compare": 2000}, {"judge": price, "editor": price})
    column = 55 * (1000 * 1e-6 + 100 * 2e-6)
    assert priced.usd_by_kind["column"] == pytest.approx(column) and priced.usd_by_kind["agent"] == 0.0
    assert priced.usd == pytest.approx(sum(priced.usd_by_kind.values()))
    unknown = estimate_cost(bound, config, {}, {"judge": price, "editor": None})
    assert unknown.usd is None and unknown.text == "unknown" and unknown.usd_by_kind["column"] is not None
    capped = estimate_cost(bound, config.model_copy(update={"max_usd": 0.01}), {"column": 1000}, {"judge": price,
                                                                                                 "editor": price})
    assert capped.usd == 0.01 and capped.uncapped_usd > 0.01 and capped.text == "$0.0100"


WORLDS = {
    "accepts": World(low={("s01-when-to-use", "clarity"): 2}),
    # Two rejections exhaust s02/clarity (2 paragraphs, score 2): the paragraph level runs and returns.
    "descends": World(low={("s02-steps", "clarity"): 2}, compare={("s02-steps", "clarity"): (2, 2)}),
}


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_a_real_compile_of_one_task_makes_no_more_calls_than_the_bound(name, tmp_path, scripted_llm) -> None:
    world = WORLDS[name]
    install_world(scripted_llm, world)
    skill, bundle = make_inputs(tmp_path)
    config = effective_config(load_deployment(), CONFIG)
    record = register_compile(tmp_path / "store", skill, bundle, config)
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    run_steps(ctx, run_step)
    calls = read_calls(ctx.cdir.calls_log)
    by_role = Counter(call.role for call in calls)
    bound = estimate(config, 1)
    assert len(calls) <= bound.calls
    assert by_role["judge"] <= bound.calls_by_kind["column"] + bound.calls_by_kind["compare"]
    assert by_role["editor"] <= bound.calls_by_kind["edit"]
    history = ctx.cdir.history()
    levels = Counter(e.level for e in history.events if isinstance(e, ScoreMatrix))
    if name == "descends":
        assert levels["paragraph"] >= 1  # the world really exercised the paragraph level
    assert all(levels[level] <= bound.matrices[level] for level in levels)
