"""One budget count (SPEC §8): the budget a resumed compile starts from and
the history the policy's budget stop reads count the same calls and the same spend, the
calls made, with a cached answer counted for neither."""

from __future__ import annotations

import shutil

import pytest

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.llm.accounting import CallRecord, append_call
from deep_pipeline.llm.budget import Budget
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.scripted_llm import register_prices

# Priced under names of their own: a price for scripted/judge would change other tests' costs.
MODELS = {"judge_model": "scripted/priced-judge", "editor_model": "scripted/priced-editor"}


def _compile(tmp_path, scripted_llm) -> CompileHandle:
    register_prices("priced-judge", 1e-6, 2e-6)
    register_prices("priced-editor", 3e-6, 4e-6)
    world = World(low={("s01-when-to-use", "clarity"): 2})
    install_world(scripted_llm, world)
    scripted_llm.always("priced-judge", world.judge)
    scripted_llm.always("priced-editor", world.editor)
    skill, bundle = make_inputs(tmp_path)
    config = effective_config(load_deployment(), {**CONFIG, **MODELS})
    record = register_compile(tmp_path / "store", skill, bundle, config)
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    run_steps(ctx, run_step)
    return ctx


def _sent(scripted_llm) -> int:
    return sum(len(scripted_llm.requests_for(name)) for name in ("priced-judge", "priced-editor"))


def _budget_and_history(ctx: CompileHandle) -> tuple[tuple[int, float], tuple[int, float]]:
    budget = Budget.from_calls_log(ctx.cdir.calls_log, max_calls=None, max_usd=None)
    history = ctx.cdir.history()
    return (budget.calls_used, budget.usd_used), (history.calls, history.usd)


def test_after_a_resume_from_the_cache_the_budget_and_the_history_agree(tmp_path, scripted_llm):
    ctx = _compile(tmp_path, scripted_llm)
    sent = _sent(scripted_llm)
    # A crash lost the last matrix and the report: the rerun takes their answers from the cache.
    shutil.rmtree(ctx.cdir.matrix_dir("section", 1))
    ctx.cdir.report_path.unlink()
    run_steps(CompileHandle.open(tmp_path / "store", ctx.cdir.key), run_step)
    assert _sent(scripted_llm) == sent  # every answer came from the cache

    (calls, usd), history = _budget_and_history(ctx)
    assert calls == sent and usd > 0
    assert history == (calls, pytest.approx(usd))


def test_a_cache_hit_in_the_calls_log_counts_against_neither_cap(tmp_path, scripted_llm):
    ctx = _compile(tmp_path, scripted_llm)
    before = _budget_and_history(ctx)[0]
    # A line that says the answer came from the cache is not a call made (SPEC §8 caps calls made).
    append_call(ctx.cdir.calls_log, CallRecord(
        step_key="k", role="judge", model="scripted/priced-judge", attempt=1, prompt_tokens=10,
        completion_tokens=10, cached_tokens=None, cost_usd=0.5, latency_s=0.0, cache_hit=True))

    budget, history = _budget_and_history(ctx)
    assert budget == (before[0], pytest.approx(before[1]))
    assert history == (before[0], pytest.approx(before[1]))
