"""Whole compiles through Dagster (ephemeral instance, or Postgres: tests/instances.py) against the plain driver.

The scripted world answers through litellm, the replay runner serves the bundle's
traces; everything else — prompts, parsing, policy, steps, records, Dagster runs,
metadata — is the real thing.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from deep_pipeline.core.keys import iteration_key
from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_with_overrides
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine import steps
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.instances import on_postgres_only_for


def decisions_of(report):
    return [(d.level, d.index, str(d.coordinate), d.reason) for d in report.decisions]


def plain(tmp, world, scripted_llm, **overrides):
    install_world(scripted_llm, world)
    skill, bundle = make_inputs(tmp / "plain")
    config = effective_config(load_deployment(), {**CONFIG, **overrides})
    record = register_compile(tmp / "plain-store", skill, bundle, config)
    return steps.run_steps(CompileHandle.open(tmp / "plain-store", record.key), steps.run_step)


def through_dagster(tmp, world, scripted_llm, instance, **overrides):

    install_world(scripted_llm, world)
    skill, bundle = make_inputs(tmp / "dg")
    record, new = register_with_overrides(instance, tmp / "store", skill, bundle, {**CONFIG, **overrides})
    assert new
    return record, drive_compile(instance, tmp / "store", record.key)


def materialized(instance, asset: str | list[str], prefix: str):
    result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset)), limit=1000, ascending=True)
    return [r.asset_materialization for r in result.records if r.asset_materialization.partition.startswith(prefix)]


SCENARIOS = {
    # One open cell whose edit the judge likes: accepted, then nothing is open.
    "accept": (World(low={("s02-steps", "clarity"): 2}), {}),
    # An open cell no edit improves: two rejections exhaust it, the compile descends into
    # that section's two paragraphs, then blocks the dimension at section level.
    "descend": (World(low={("s02-steps", "actionability"): 2}, compare={("s02-steps", "actionability"): (2, 2)}), {}),
    # Nothing open: converged at once.
    "converge": (World(), {}),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_dagster_compile_matches_plain_driver(name, env, scripted_llm, dagster_storage):
    on_postgres_only_for(name, {"descend"})  # both levels: the richest of the three
    world, overrides = SCENARIOS[name]
    reference = plain(env, World(**{k: dict(v) for k, v in vars(world).items() if k != "calls"}), scripted_llm, **overrides)
    scripted_llm.reset()
    instance = dagster_storage.instance()
    record, report = through_dagster(env, world, scripted_llm, instance, **overrides)

    assert decisions_of(report) == decisions_of(reference)
    assert [(lv.level, lv.stop_reason) for lv in report.levels] == [(lv.level, lv.stop_reason) for lv in reference.levels]
    decisions = materialized(instance, "decision", record.key)
    assert [m.partition for m in decisions] == [iteration_key(record.key, d.level, d.index) for d in report.decisions]
    assert [m.metadata["reason"].value for m in decisions] == [d.reason for d in report.decisions]
    if name == "accept":
        assert [d.reason for d in report.decisions] == ["target_improved_without_runtime_regression"]
        final = (env / "store" / record.key / "final" / "skill" / "SKILL.md").read_text()
        assert "IMPROVED-s02-steps" in final and "## Steps" in final
        assert report.final_rollouts  # the accepted candidate's traces ran on S_final
    if name == "descend":
        reasons = [d.reason for d in report.decisions]
        assert reasons[:2] == ["target_cell_did_not_improve"] * 2
        assert {lv.level: lv.stop_reason for lv in report.levels}["section"] == "available_coordinates_exhausted"
        assert materialized(instance, "level_matrix", f"{record.key}/paragraph/"), "the descent scored a paragraph matrix"
    if name == "converge":
        assert report.decisions == []
        assert report.levels[0].stop_reason == "normalized_gap_converged"
    # Every column of every matrix was materialized on its own.
    for dim in ("correctness", "actionability", "coverage", "clarity", "concision"):
        assert materialized(instance, ["matrix", dim], record.key)
    checks = [("compile_report", "report_matches_decisions"), ("final_skill", "final_differs_only_in_edited_markdown")]
    if report.decisions:
        checks.append(("candidate_package", "candidate_keeps_structure"))
    for asset, check in checks:
        history = instance.event_log_storage.get_asset_check_execution_history(dg.AssetCheckKey(dg.AssetKey(asset), check), limit=50)
        assert history and all(h.status.value == "SUCCEEDED" for h in history), (asset, check)


def test_resume_after_finish_makes_no_new_call(env, scripted_llm, dagster_storage):
    world = World(low={("s02-steps", "clarity"): 2})
    instance = dagster_storage.instance()
    record, report = through_dagster(env, world, scripted_llm, instance)
    calls = len(scripted_llm.requests)

    again = drive_compile(instance, env / "store", record.key)
    assert decisions_of(again) == decisions_of(report)
    assert len(scripted_llm.requests) == calls


def test_a_resume_of_a_finalized_compile_restores_report_html_and_removes_the_killed_writes_temp(
        env, scripted_llm, dagster_storage):
    # A kill in the middle of report.html's atomic write (after report.json) leaves no report.html
    # and its temp file; the resume runs no step, and still mends both.
    instance = dagster_storage.instance()
    record, report = through_dagster(env, World(low={("s02-steps", "clarity"): 2}), scripted_llm, instance)
    folder = CompileHandle.open(env / "store", record.key).cdir.path
    (folder / "report.html").unlink(missing_ok=True)
    orphan = folder / ".report.html.k1ll3d.tmp"
    orphan.write_bytes(b"<!doctype html><html><head><title>half a page")
    calls = len(scripted_llm.requests)
    notes: list[str] = []

    again = drive_compile(instance, env / "store", record.key, progress=notes.append)
    assert decisions_of(again) == decisions_of(report) and len(scripted_llm.requests) == calls
    assert not orphan.exists()
    assert b"</html>" in (folder / "report.html").read_bytes()
    assert any("wrote report.html, missing after the compile was finalized" in n for n in notes), notes


def test_definitions_load():
    from deep_pipeline.definitions import defs

    dg.Definitions.validate_loadable(defs)
    columns = [f"matrix/{d}" for d in ("actionability", "clarity", "concision", "correctness", "coverage")]
    # job -> (partition set, the assets it materializes) for a step's job; (None, its op) for the others.
    expected = {
        "prepare_inputs": ("compiles", ["input_traces"]),
        "score_matrix": ("matrices", ["level_matrix", *columns]),
        "run_iteration": ("iterations", ["candidate_edit", "candidate_package", "candidate_rollouts", "comparison",
                                         "decision"]),
        "finalize": ("compiles", ["compile_report", "final_skill"]),
        "start_compile": (None, ["start_compile_op"]),
        "compile": (None, ["compile_op"]),
        "start_batch": (None, ["start_batch_op"]),
    }
    for name, (partitions, selected) in expected.items():
        job = defs.resolve_job_def(name)
        if partitions is None:
            assert (job.partitions_def, sorted(n.name for n in job.graph.node_defs)) == (None, selected), name
        else:
            keys = sorted(key.to_user_string() for key in job.asset_layer.selected_asset_keys)
            assert (job.partitions_def.name, keys) == (partitions, selected), name


@pytest.mark.parametrize("path", ["plain", "dagster"])
@pytest.mark.parametrize("max_calls", [3, 5, 6])
def test_budget_ends_the_compile_cleanly(max_calls, path, env, scripted_llm, dagster_storage):
    # 3 calls: the first matrix stops part-way; 5: its last column spends the budget;
    # 6: the matrix is done and the iteration's edit spends it.
    on_postgres_only_for((max_calls, path), {(3, "dagster"), (6, "dagster")})  # "plain" uses no Dagster storage
    world = World(low={("s02-steps", "clarity"): 2})
    if path == "plain":
        report = plain(env, world, scripted_llm, max_calls=max_calls)
    else:
        report = through_dagster(env, world, scripted_llm, dagster_storage.instance(), max_calls=max_calls)[1]
    assert report.status == "budget_exhausted"
    assert report.usage_total.calls == max_calls
    assert report.final_skill_dir and (Path(report.final_skill_dir) / "SKILL.md").is_file()
    if max_calls == 6:
        assert [d.reason for d in report.decisions] == ["budget_exhausted"]
    else:
        assert report.decisions == []


def test_compile_folder_deleted_under_a_running_compile_fails_the_next_step_clearly(env, scripted_llm, dagster_storage):
    import shutil

    from deep_pipeline.errors import StepError

    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(env / "dg")
    instance = dagster_storage.instance()
    record, _ = register_with_overrides(instance, env / "store", skill, bundle, CONFIG)

    def delete_after_first_step(line):
        shutil.rmtree(env / "store" / record.key)

    with pytest.raises(StepError, match="compile folder is missing"):
        drive_compile(instance, env / "store", record.key, progress=delete_after_first_step)


def test_compile_job_carries_a_compile_to_its_end_with_nested_runs(env, scripted_llm, dagster_storage):
    from deep_pipeline.definitions import defs

    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(env / "job")
    instance = dagster_storage.instance()
    run_config = {"ops": {"compile_op": {"config": {"skill_dir": str(skill), "bundle": str(bundle), "overrides": CONFIG}}}}
    result = defs.resolve_job_def("compile").execute_in_process(instance=instance, run_config=run_config)
    assert result.success
    key = result.output_for_node("compile_op")
    assert (env / "store" / key / "report.json").is_file()
    jobs = [r.dagster_run.job_name for r in instance.get_run_records()]
    assert {"prepare_inputs", "score_matrix", "run_iteration", "finalize"} <= set(jobs)
    assert len(materialized(instance, "decision", key)) == 1


@pytest.mark.parametrize("stop_after", [1, 3])
def test_interrupted_compile_resumes_to_the_same_end_without_repeating_calls(stop_after, env, scripted_llm,
                                                                            dagster_storage):
    on_postgres_only_for(stop_after, {3})
    scenario = dict(low={("s02-steps", "actionability"): 2}, compare={("s02-steps", "actionability"): (2, 2)})
    reference = plain(env, World(**scenario), scripted_llm)
    reference_calls = len(scripted_llm.requests)
    scripted_llm.reset()
    install_world(scripted_llm, World(**scenario))
    skill, bundle = make_inputs(env / "dg")
    instance = dagster_storage.instance()
    record, _ = register_with_overrides(instance, env / "store", skill, bundle, CONFIG)
    steps = []

    def interrupt(line):
        steps.append(line)
        if len(steps) == stop_after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        drive_compile(instance, env / "store", record.key, progress=interrupt)
    report = drive_compile(instance, env / "store", record.key)
    assert decisions_of(report) == decisions_of(reference)
    assert len(scripted_llm.requests) == reference_calls


def test_a_stored_edit_that_no_longer_validates_is_regenerated_with_fresh_downstream_records(env, scripted_llm):
    from deep_pipeline.engine import iteration_steps
    from deep_pipeline.engine.records import EditRecord
    from deep_pipeline.store import atomic_write_json, read_model

    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(env / "in")
    record = register_compile(env / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    ctx = CompileHandle.open(env / "store", record.key)
    steps.run_step(ctx, steps.next_step(ctx))  # inputs
    steps.run_step(ctx, steps.next_step(ctx))  # the section matrix
    it = iteration_steps.Iteration(ctx, "section", 0)
    edit = iteration_steps.edit_step(it)
    iteration_steps.candidate_step(it, edit)
    # The stored edit is corrupted: it no longer applies to the current SKILL.md.
    atomic_write_json(it.path("edit.json"), edit.model_copy(update={"candidate_skill_text": "tampered"}))
    calls = len(scripted_llm.requests_for("editor"))
    fresh = iteration_steps.edit_step(it)
    assert len(scripted_llm.requests_for("editor")) == calls + 1  # a new call, not a cache hit
    assert fresh.attempts[0].attempt == len(edit.attempts)
    assert not it.path("candidate.json").exists() and not it.path("candidate").exists()
    assert read_model(it.path("edit.json"), EditRecord).candidate_skill_text != "tampered"


def test_an_editor_that_never_answers_in_shape_is_a_rejection_not_a_dead_compile(env, scripted_llm):
    world = World(low={("s02-steps", "clarity"): 2})
    install_world(scripted_llm, world)
    scripted_llm.always("editor", lambda req: {"unit_id": "x", "new_text": "   "})  # blank: never valid
    skill, bundle = make_inputs(env / "in")
    config = effective_config(load_deployment(), CONFIG)
    record = register_compile(env / "store", skill, bundle, config)
    report = steps.run_steps(CompileHandle.open(env / "store", record.key), steps.run_step)
    assert report.status == "completed"
    assert [d.reason for d in report.decisions][:2] == ["edit_validation_exhausted"] * 2
    edit = (env / "store" / record.key / "iterations" / "section-i00" / "edit.json").read_text()
    assert "gave no valid answer" in edit  # the failure is on record, attempt by attempt


def test_a_resource_key_reaches_the_model_and_nothing_on_disk(env, scripted_llm):
    secret = "sk-resource-secret-0123456789"
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(env / "in")
    record = register_compile(env / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    report = steps.run_steps(CompileHandle.open(env / "store", record.key, api_keys={"scripted": secret}), steps.run_step)
    assert report.decisions and all(r.api_key == secret for r in scripted_llm.requests)
    leaked = [p for p in (env / "store").rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []


def test_provider_keys_resource_takes_env_vars_and_hands_them_to_steps(env, monkeypatch):
    from deep_pipeline.defs.resources import CompileStoreResource, ProviderKeysResource

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-000000")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keys = ProviderKeysResource.from_environment()
    assert keys.anthropic_api_key == "ANTHROPIC_API_KEY" and keys.openai_api_key is None  # the variable, not its value
    skill, bundle = make_inputs(env / "in")
    record = register_compile(env / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    with dg.build_resources({"store": CompileStoreResource(root=str(env / "store"), provider_keys=keys)}) as built:
        ctx = built.store.context(record.key)
    assert ctx.api_keys == {"anthropic": "sk-ant-test-000000"}  # resolved by Dagster when the run builds it
