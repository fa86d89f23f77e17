"""The batch manifest: a compile per entry that has none yet, through the start_batch job."""

from __future__ import annotations

import pytest
import yaml

from deep_pipeline.runtime.register import register_batch
from deep_pipeline.engine.batch import load_manifest
from deep_pipeline.errors import InputError
from tests.compile_world import make_inputs


def manifest(tmp_path, entries):
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump({"entries": entries}))
    return path


def test_batch_starts_each_new_entry_once(tmp_path, dagster_storage):
    skill, bundle = make_inputs(tmp_path)
    entries = [
        {"skill": str(skill.relative_to(tmp_path)), "bundle": "bundle.json", "overrides": {"runner": "replay"}},
        {"skill": str(skill.relative_to(tmp_path)), "bundle": "bundle.json", "overrides": {"runner": "replay", "rollouts": 2}},
    ]
    path = manifest(tmp_path, entries)
    instance = dagster_storage.instance()
    first = register_batch(instance, tmp_path / "store", path)
    assert [new for _, new in first] == [True, True] and first[0][0] != first[1][0]
    assert sorted(instance.get_dynamic_partitions("compiles")) == sorted(k for k, _ in first)
    again = register_batch(instance, tmp_path / "store", path)
    assert [new for _, new in again] == [False, False]
    assert [k for k, _ in again] == [k for k, _ in first]


def test_batch_job_runs_from_the_definitions(tmp_path, monkeypatch, dagster_storage):
    from deep_pipeline.definitions import defs

    skill, bundle = make_inputs(tmp_path)
    path = manifest(tmp_path, [{"skill": str(skill), "bundle": str(bundle), "overrides": {"runner": "replay"}}])
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    instance = dagster_storage.instance()
    result = defs.resolve_job_def("start_batch").execute_in_process(
        instance=instance, run_config={"ops": {"start_batch_op": {"config": {"manifest": str(path)}}}}
    )
    assert result.success
    assert len(result.output_for_node("start_batch_op")) == 1
    assert len(instance.get_dynamic_partitions("compiles")) == 1


def test_a_batch_entry_may_name_a_task_set(tmp_path, dagster_storage):
    import json

    skill, bundle = make_inputs(tmp_path)
    data = json.loads(bundle.read_text())
    (tmp_path / "other.json").write_text(json.dumps({**data, "task_name": "release-notes", "prompt": "Write the notes.",
                                                     "traces": [{**t, "prompt": "Write the notes."} for t in data["traces"]]}))
    (tmp_path / "set.yaml").write_text(yaml.safe_dump([{"bundle": "bundle.json", "split": "train"},
                                                       {"bundle": "other.json", "split": "holdout"}]))
    path = manifest(tmp_path, [{"skill": str(skill.relative_to(tmp_path)), "tasks": "set.yaml",
                                "overrides": {"runner": "replay"}}])
    [(key, new)] = register_batch(dagster_storage.instance(), tmp_path / "store", path)
    record = json.loads((tmp_path / "store" / key / "compile.json").read_text())
    assert new and [(t["task"], t["split"]) for t in record["tasks"]] == [("status-update", "training"),
                                                                           ("release-notes", "held_out")]


@pytest.mark.parametrize(
    "content, needle",
    [
        ("entries: [{skill: a}]", "entries.0: .*bundle .*tasks"),
        ("entries: [{skill: a, bundle: b, tasks: c}]", "entries.0: .*one of the two"),
        ("entries: [{skill: a, bundle: b, extra: 1}]", "extra"),
        ("- just a list", "expected a mapping"),
    ],
)
def test_bad_manifest_is_one_clear_error(tmp_path, content, needle):
    path = tmp_path / "batch.yaml"
    path.write_text(content)
    with pytest.raises(InputError, match=needle) as err:
        load_manifest(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)




def test_the_daily_schedule_reads_the_homes_manifest_and_says_where_it_goes(env):
    # The schedule reads $DAGSTER_HOME/batch.yaml, not a batch.yaml wherever `dagster dev` happens to run
    import dagster as dg

    from deep_pipeline.defs.schedules import EXAMPLE, batch_schedule
    from deep_pipeline.engine.compiles import check_inputs
    from deep_pipeline.engine.settings import effective_config, load_deployment

    manifest_path = env / "home" / "batch.yaml"
    with dg.build_schedule_context() as context:
        skipped = batch_schedule.evaluate_tick(context)
    assert not skipped.run_requests and str(manifest_path) in skipped.skip_message and str(EXAMPLE) in skipped.skip_message

    # the shipped example is a valid manifest whose entries are real inputs
    example = load_manifest(EXAMPLE)
    for entry in example.entries:
        check_inputs(EXAMPLE.parent / entry.skill, EXAMPLE.parent / entry.bundle,
                     effective_config(load_deployment(), entry.overrides))
    manifest_path.write_text(EXAMPLE.read_text())
    with dg.build_schedule_context() as context:
        [request] = batch_schedule.evaluate_tick(context).run_requests
    assert request.run_config["ops"]["start_batch_op"]["config"]["manifest"] == str(manifest_path)
