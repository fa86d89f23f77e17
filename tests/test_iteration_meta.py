"""The iteration's asset metadata is built from its stored records alone (defs/iteration_meta.py):
a compile run by the plain driver, with no Dagster run at all, gives every asset's page."""

from __future__ import annotations

from urllib.parse import quote

from deep_pipeline.defs.iteration_meta import comparison_meta, decision_meta, edit_meta, package_meta, rollouts_meta
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.iteration_steps import Iteration, decision_step
from deep_pipeline.engine.records import CandidateRecord, ComparisonRecord, EditRecord, RolloutsRecord
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_step, run_steps
from tests.compile_world import CONFIG, World, install_world, make_inputs

LOW = {("s02-steps", "clarity"): 2}


class GrowingWorld(World):
    """An editor whose new text is ten times the old one: `max_edit_growth` short-circuits the iteration."""

    def editor(self, request) -> dict:
        answer = super().editor(request)
        answer["new_text"] = answer["new_text"] + "Check every line twice before you write. " * 30 + "\n"
        return answer


def stored_iterations(tmp_path, scripted_llm, world: World | None = None, **config):
    install_world(scripted_llm, world or World(low=LOW))
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle,
                              effective_config(load_deployment(), {**CONFIG, **config}))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    report = run_steps(ctx, run_step)
    return ctx, report


def value(meta: dict, name: str):
    return meta[name].value


def test_every_asset_of_a_stored_iteration_gets_its_page_from_the_records(tmp_path, scripted_llm):
    ctx, report = stored_iterations(tmp_path, scripted_llm)
    first = report.decisions[0]
    it = Iteration(ctx, first.level, first.index)
    edit = it.load("edit.json", EditRecord)
    candidate = it.load("candidate.json", CandidateRecord)
    rollouts = it.load("rollouts.json", RolloutsRecord)
    compared = it.load("comparison.json", ComparisonRecord)
    calls_before = len(scripted_llm.requests)

    meta = edit_meta(it, edit)
    assert value(meta, "coordinate") == str(first.coordinate) == str(edit.coordinate)
    assert value(meta, "edit_sha256") == edit.edit_sha256 and value(meta, "status") == edit.status
    assert value(meta, "edit_json_path") == str(it.path("edit.json"))

    meta = package_meta(it, candidate)
    assert value(meta, "skipped") == "no" and value(meta, "package_hash") == candidate.package_hash

    meta = rollouts_meta(it, rollouts)
    assert value(meta, "trace_ids") == rollouts.trace_ids and value(meta, "batch") == it.batch

    meta = comparison_meta(it, compared)
    c = compared.comparison
    assert (value(meta, "incumbent_score"), value(meta, "candidate_score")) == (c.incumbent_score, c.candidate_score)
    assert value(meta, "reason") == c.reason

    # The decision step on a stored iteration reads its record back: no call, the same decision.
    decided = decision_step(it, edit, compared)
    assert decided.record.decision.reason == first.reason
    meta = decision_meta(it, edit, decided.record, decided.matrix_after, "run-1")
    assert value(meta, "accepted") == (1.0 if first.accepted else 0.0) and value(meta, "reason") == first.reason
    assert value(meta, "compile") == ctx.cdir.key
    assert value(meta, "link_candidate_edit").endswith(f"partition={quote(it.key, safe='')}")
    assert "run-1" in value(meta, "link_run")
    assert "@@" in value(meta, "edit_diff") and value(meta, "matrix_after") != "-"
    assert len(scripted_llm.requests) == calls_before  # built from the folder: no model call


def test_a_short_circuited_iteration_says_skipped_on_each_later_asset(tmp_path, scripted_llm):
    ctx, report = stored_iterations(tmp_path, scripted_llm, GrowingWorld(low=LOW), max_edit_growth=2)
    assert report.decisions and all(d.reason == "edit_too_large" for d in report.decisions)
    for d in report.decisions:
        it = Iteration(ctx, d.level, d.index)
        candidate = it.load("candidate.json", CandidateRecord)
        assert value(package_meta(it, candidate), "skipped") == candidate.skipped.replace("_", " ")
        assert "package_hash" not in package_meta(it, candidate)
        assert "batch" not in rollouts_meta(it, it.load("rollouts.json", RolloutsRecord))
        compared = it.load("comparison.json", ComparisonRecord)
        assert value(comparison_meta(it, compared), "skipped") == "edit too large"
        assert "incumbent_score" not in comparison_meta(it, compared)
