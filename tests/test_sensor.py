"""The loop sensor, evaluated with build_sensor_context on an ephemeral instance (or Postgres: tests/instances.py)."""

from __future__ import annotations

import json
import logging

import dagster as dg
import pytest

from deep_pipeline.core.actions import ScoreLevel
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.defs.sensors import compile_loop_sensor
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.steps import next_step, run_step
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import CONFIG, World, install_world, make_inputs


@pytest.fixture
def setup(tmp_path, scripted_llm, dagster_storage):
    def make(world: World):
        install_world(scripted_llm, world)
        skill, bundle = make_inputs(tmp_path)
        record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
        instance = dagster_storage.instance()
        instance.add_dynamic_partitions("compiles", [record.key])
        return instance, record, CompileHandle.open(tmp_path / "store", record.key)

    return make, tmp_path


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def tick(instance, root, cursor=None) -> tuple[dg.SensorResult, list[str]]:
    """One evaluation of the sensor: its result and the warnings it logged."""
    warnings = _Collect()
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"store": CompileStoreResource(root=str(root))}) as context:
        context.log.addHandler(warnings)  # the sensor's log is a logging.Logger of Dagster's
        return compile_loop_sensor(context), warnings.lines


def test_new_compile_gets_its_inputs_run_then_nothing_until_something_changes(setup):
    make, tmp = setup
    instance, record, _ = make(World())
    result, _ = tick(instance, tmp / "store")
    assert [(r.job_name, r.partition_key, r.run_key) for r in result.run_requests] == [
        ("prepare_inputs", record.key, f"inputs:{record.key}")
    ]
    assert result.run_requests[0].tags["deep/compile"] == record.key
    cursor = json.loads(result.cursor)
    assert record.key in cursor["seen"]

    again, _ = tick(instance, tmp / "store", result.cursor)
    assert again.run_requests == []  # nothing new since the cursor


def test_a_repeated_tick_requests_nothing_new(setup):
    """Dagster launches a run key once, so a tick that repeats one (a concurrent tick from the
    same old cursor) asks for no new run; a tick after it, with its cursor, asks for none."""
    make, tmp = setup
    instance, record, _ = make(World())
    first, _ = tick(instance, tmp / "store")
    second, _ = tick(instance, tmp / "store")  # a concurrent tick from the same old cursor
    requested = [(r.job_name, r.partition_key, r.run_key) for r in first.run_requests]
    assert requested == [("prepare_inputs", record.key, f"inputs:{record.key}")]
    assert [(r.job_name, r.partition_key, r.run_key) for r in second.run_requests] == requested
    later, _ = tick(instance, tmp / "store", first.cursor)  # the next tick, nothing materialized since
    assert later.run_requests == [] and later.dynamic_partitions_requests == []


def test_cursor_follows_materializations_page_by_page(setup, monkeypatch):
    monkeypatch.setattr("deep_pipeline.defs.sensors.PAGE", 2)  # five events: three pages
    make, tmp = setup
    instance, record, ctx = make(World())
    first, _ = tick(instance, tmp / "store")
    run_step(ctx, next_step(ctx))  # the inputs step, done outside the sensor
    ghosts = [f"gone-{n}" for n in range(4)]  # compiles whose folders are gone: each tick skips them, saying so
    for partition in [*ghosts, record.key]:  # ours last: only the third page holds it
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key="input_traces", partition=partition))
    result, warnings = tick(instance, tmp / "store", first.cursor)
    assert [(r.job_name, r.partition_key) for r in result.run_requests] == [("score_matrix", f"{record.key}/section/m00")]
    assert result.dynamic_partitions_requests[0].partition_keys == [f"{record.key}/section/m00"]
    assert [line.split(":")[0] for line in warnings] == ghosts  # every page's compile was looked at
    events = instance.fetch_materializations(dg.AssetKey("input_traces"), limit=100).records
    assert len(events) == 5 and json.loads(result.cursor)["ids"]["input_traces"] == max(e.storage_id for e in events)
    again, warnings = tick(instance, tmp / "store", result.cursor)  # the cursor is past all five
    assert again.run_requests == [] and warnings == []


def test_descent_is_requested_as_the_paragraph_matrix(setup):
    make, tmp = setup
    world = World(low={("s02-steps", "actionability"): 2}, compare={("s02-steps", "actionability"): (2, 2)})
    instance, record, ctx = make(world)
    first, _ = tick(instance, tmp / "store")
    # Run the steps up to the descent (two rejections of the one open cell).
    while not (isinstance((step := next_step(ctx)).action, ScoreLevel) and step.action.level == "paragraph"):
        run_step(ctx, step)
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key="decision", partition=f"{record.key}/section/i01"))
    result, _ = tick(instance, tmp / "store", first.cursor)
    assert [(r.job_name, r.partition_key, r.run_key) for r in result.run_requests] == [
        ("score_matrix", f"{record.key}/paragraph/m00", f"matrix:{record.key}/paragraph/m00")
    ]
    assert result.dynamic_partitions_requests[0].partitions_def_name == "matrices"


def test_deleted_compile_folder_is_skipped_with_a_warning(setup):
    import shutil

    make, tmp = setup
    instance, record, _ = make(World())
    shutil.rmtree(tmp / "store" / record.key)
    result, warnings = tick(instance, tmp / "store")
    assert result.run_requests == []
    assert len(warnings) == 1 and warnings[0].startswith(f"{record.key}: skipped: ") and "compile.json" in warnings[0]


def test_a_compile_locked_by_a_driver_is_retried_on_later_ticks(setup):
    from deep_pipeline.runtime.driver import driver_lock

    make, tmp = setup
    instance, record, ctx = make(World())
    with driver_lock(ctx):
        locked, _ = tick(instance, tmp / "store")
    assert locked.run_requests == [] and json.loads(locked.cursor)["pending"] == [record.key]
    # The driver stopped (say, Ctrl-C) and nothing new was materialized: the next tick carries it on.
    later, _ = tick(instance, tmp / "store", locked.cursor)
    assert [r.run_key for r in later.run_requests] == [f"inputs:{record.key}"]
    assert json.loads(later.cursor)["pending"] == []


def test_a_tick_releases_a_run_whose_process_is_gone_and_frees_its_slot(setup, dagster_storage):
    import subprocess
    import uuid

    from dagster._core.test_utils import create_run_for_test

    import socket

    from deep_pipeline.runtime.sweep import WORKER_TAG, WorkerClaim, process_tags

    make, tmp = setup
    make(World())
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now

    def dead_tags(run_id: str) -> dict:
        claim = WorkerClaim(gone.pid, socket.gethostname(), None, run_id)
        return {WORKER_TAG: claim.tag(), "deep/compile": "c"}

    dead_id, alive_id, retry_id = (str(uuid.uuid4()) for _ in range(3))
    with dagster_storage.instance(on_disk=True) as instance:  # pool slots: not in the in-memory storage
        dead = create_run_for_test(instance, job_name="score_matrix", run_id=dead_id,
                                   status=dg.DagsterRunStatus.STARTED, tags=dead_tags(dead_id))
        alive = create_run_for_test(instance, job_name="score_matrix", run_id=alive_id, status=dg.DagsterRunStatus.STARTED,
                                    tags={**process_tags(alive_id), "deep/compile": "d"})  # this process: running
        # Dagster's run retry copies the parent's tags: the dead pid is the parent's claim, not the retry's.
        retry = create_run_for_test(instance, job_name="score_matrix", run_id=retry_id,
                                    status=dg.DagsterRunStatus.STARTED, tags=dead_tags(dead_id))
        instance.event_log_storage.set_concurrency_slots("llm", 3)
        for run in (dead, alive, retry):
            assert instance.event_log_storage.claim_concurrency_slot("llm", run.run_id, "matrix_columns").is_claimed
        tick(instance, tmp / "store")
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
        assert instance.get_run_by_id(retry.run_id).status == dg.DagsterRunStatus.STARTED
        claimed = instance.event_log_storage.get_concurrency_info("llm").claimed_slots
        assert sorted(slot.run_id for slot in claimed) == sorted([alive.run_id, retry.run_id])


def test_a_compile_whose_last_step_failed_is_not_relaunched_when_the_sensor_starts(tmp_path, scripted_llm, dagster_storage,
                                                                                     monkeypatch):
    # A CLI compile failed (the judge refuses the key); `make ui` starts the sensor afresh
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    from deep_pipeline.runtime.driver import drive_compile
    from deep_pipeline.runtime.register import register_with_overrides
    from deep_pipeline.errors import StepError
    from tests.scripted_llm import auth_error

    scripted_llm.always("judge", auth_error())
    instance = dagster_storage.instance()
    skill, bundle = make_inputs(tmp_path)
    record, _ = register_with_overrides(instance, tmp_path / "store", skill, bundle, dict(CONFIG))
    with pytest.raises(StepError):
        drive_compile(instance, tmp_path / "store", record.key)
    [failed] = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))

    result, _ = tick(instance, tmp_path / "store")  # no cursor: the first tick after `dagster dev` starts
    assert result.run_requests == []
    why = result.skip_reason.skip_message
    assert f"{record.key}: not relaunched" in why and failed.run_id in why and "x-api-key" in why
    assert f"deep-pipeline resume {record.key}" in why


def test_a_failed_cli_step_run_is_not_left_for_the_daemons_run_retry(tmp_path, scripted_llm, dagster_storage, monkeypatch):
    # With our run_retries (max 1), a CLI run's failure was marked will_retry, and the
    # daemon of the next `make ui` launched it again; the CLI's user resumes, the daemon does not
    from dagster._core.storage.tags import WILL_RETRY_TAG

    from deep_pipeline.runtime.driver import drive_compile
    from deep_pipeline.runtime.register import register_with_overrides
    from deep_pipeline.errors import StepError
    from tests.scripted_llm import auth_error

    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    scripted_llm.always("judge", auth_error())
    instance = dg.DagsterInstance.from_config(str(dagster_storage.home(tmp_path / "home")))  # our dagster.yaml
    try:
        assert instance.run_retries_enabled
        skill, bundle = make_inputs(tmp_path)
        record, _ = register_with_overrides(instance, tmp_path / "store", skill, bundle, dict(CONFIG))
        with pytest.raises(StepError):
            drive_compile(instance, tmp_path / "store", record.key)
        [failed] = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        assert failed.tags.get(WILL_RETRY_TAG) == "false"
    finally:
        instance.dispose()
