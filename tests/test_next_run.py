"""Under the real daemon, each step run the loop sensor launched submits the compile's next step
as it ends (runtime/next_run.py): the chain of runs, not the sensor's ticks, carries the compile.

What shows it cannot depend on timing: every run after the first names the run before it in
`deep/submitted_by`, each run key has one run and it succeeded, and Dagster's own dedupe
(`fetch_existing_runs`, the sensor daemon's lookup of a request's run key) finds every one of
them as the loop sensor's, so a request of the sensor for any of those steps would be dropped.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import dagster as dg
import pytest

from deep_pipeline.runtime.tags import LOOP_SENSOR, RUN_KEY_TAG, SENSOR_NAME_TAG, SUBMITTED_BY_TAG
from tests.served_world import cli_env
from tests.test_daemon import compile_under_daemon


def loop_sensor_state(instance: dg.DagsterInstance):
    from dagster._core.scheduler.instigation import InstigatorType

    (state,) = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
                if s.instigator_name == LOOP_SENSOR]
    return state


@pytest.mark.slow
def test_each_step_run_submits_the_next_and_no_step_runs_twice(tmp_path, dagster_storage):
    from dagster._daemon.sensor import fetch_existing_runs

    home = dagster_storage.home(tmp_path / "home")  # our dagster.yaml: the run queue, one run per compile
    key = compile_under_daemon(tmp_path, home, cli_env(home))
    log = (tmp_path / "daemon.log").read_text()
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    assert [d["reason"] for d in report["decisions"]] == ["target_improved_without_runtime_regression"], log[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = sorted(instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key})),
                         key=lambda r: r.create_timestamp)
        runs = [r.dagster_run for r in records]
        names = [r.job_name for r in runs]
        assert names[0] == "prepare_inputs" and names[-1] == "finalize" and "run_iteration" in names, names
        assert set(names) == {"prepare_inputs", "score_matrix", "run_iteration", "finalize"}  # one task: no task steps
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [(r.job_name, r.status) for r in runs]
        assert all(r.tags.get(SENSOR_NAME_TAG) == LOOP_SENSOR for r in runs)
        # the sensor launched the first; each later one was submitted by the run of the step before
        assert SUBMITTED_BY_TAG not in runs[0].tags
        chain = [r.tags.get(SUBMITTED_BY_TAG) for r in runs[1:]]
        assert chain == [r.run_id for r in runs[:-1]], next_step_lines(instance, runs, log)
        # one run per run key: no step ran twice
        keys = Counter(r.tags[RUN_KEY_TAG] for r in runs)
        assert set(keys.values()) == {1}, keys
        # Dagster's lookup of the sensor's runs by run key finds the submitted runs too (same
        # run key, sensor name and repository as the sensor's own): its requests would be dropped.
        state = loop_sensor_state(instance)
        sensor = SimpleNamespace(name=LOOP_SENSOR, get_remote_origin=lambda: state.origin)
        found = fetch_existing_runs(instance, sensor, [dg.RunRequest(run_key=k) for k in keys])
        assert {k: r.run_id for k, r in found.items()} == {r.tags[RUN_KEY_TAG]: r.run_id for r in runs}


def next_step_lines(instance: dg.DagsterInstance, runs: list, daemon_log: str) -> str:
    """What each run said about its next step, and the sensor's lines: why a link of the chain is missing."""
    lines = []
    for run in runs:
        said = [e.user_message for e in instance.all_logs(run.run_id)
                if "next step" in (e.user_message or "") or "deep-pipeline" in (e.user_message or "")]
        lines.append(f"{run.job_name} {run.run_id[:8]} submitted_by={run.tags.get(SUBMITTED_BY_TAG, '-')[:8]}: {said}")
    sensor = [line for line in daemon_log.splitlines() if "compile_loop" in line or "SensorDaemon" in line]
    return "\n".join(lines + sensor[-40:])
