"""A compile's chain of runs under the real daemon, one compile for both tests here (its
daemon, code servers and run workers are the suite's dearest set-up):

- each step run the loop sensor launched submits the compile's next step as it ends
  (runtime/next_run.py): the chain of runs, not the sensor's ticks, carries the compile;
- a step whose run failed to launch is asked for again by the loop sensor (core/retry.py,
  runtime/run_history.py): the compile ends with the decisions of an undisturbed run, no
  `resume` typed, and while it waited the sensor's tick and `status` named it.

The launch failure is the launcher's (tests/fail_once_launcher.py): the first run of
`run_iteration` fails before any step body runs, as a run whose code server timed out starting
did. What shows the chain cannot depend on timing: every run after the first names the run
before it in `deep/submitted_by` (but the sensor's retry of the failed launch: retries stay the
sensor's), each run key has one run, and Dagster's own dedupe (`fetch_existing_runs`, the sensor
daemon's lookup of a request's run key) finds every one of them as the loop sensor's, so a
request of the sensor for any of those steps would be dropped. .ci/run's Postgres pass checks
the chain on the batch under faults (tests/test_faults_under_load.py), not on a compile of its own.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
import yaml

from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.status import compile_status
from deep_pipeline.runtime.tags import LOOP_SENSOR, RUN_KEY_TAG, SENSOR_NAME_TAG, SUBMITTED_BY_TAG
from tests.instances import Storages
from tests.served_world import cli_env
from tests.test_daemon import compile_under_daemon

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def loop_sensor(instance: dg.DagsterInstance) -> SimpleNamespace:
    """The loop sensor as the sensor daemon's `fetch_existing_runs` reads it: its name and origin."""
    from dagster._core.scheduler.instigation import InstigatorType

    (state,) = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
                if s.instigator_name == LOOP_SENSOR]
    return SimpleNamespace(name=LOOP_SENSOR, get_remote_origin=lambda: state.origin)


def sensor_skip_reasons(instance: dg.DagsterInstance) -> list[str]:
    from dagster._core.scheduler.instigation import InstigatorType

    (state,) = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
                if s.instigator_name == LOOP_SENSOR]
    return [t.skip_reason or "" for t in instance.get_ticks(state.instigator_origin_id, state.selector_id)]


@dataclass
class DaemonCompile:
    home: Path
    key: str
    failed_run: str  # the run whose launch was failed
    seen_waiting: list[str]  # `status`'s waiting lines while the compile waited
    daemon_log: str


@pytest.fixture(scope="module")
def daemon_compile(tmp_path_factory):
    """A compile of one task carried by `dagster-daemon`, the first launch of its iteration's run failed."""
    tmp_path = tmp_path_factory.mktemp("daemon-compile")
    with pytest.MonkeyPatch.context() as monkeypatch:
        storages = Storages(tmp_path, monkeypatch)
        try:
            home = storages.home(tmp_path / "home")  # our dagster.yaml: the run queue, one run per compile
            config = yaml.safe_load((home / "dagster.yaml").read_text()) or {}
            config["run_launcher"] = {"module": "tests.fail_once_launcher", "class": "FailOnceLauncher",
                                      "config": {"job": "run_iteration", "marker": str(tmp_path / "failed-once")}}
            (home / "dagster.yaml").write_text(yaml.safe_dump(config))
            env = {**cli_env(home), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
            seen_waiting: list[str] = []

            def watch(key: str) -> None:
                status = compile_status(CompileHandle.open(home / "compiles", key))
                if status.state == "waiting_retry":
                    seen_waiting.append(status.failure.waiting)

            key = compile_under_daemon(tmp_path, home, env, watch)
            assert (tmp_path / "failed-once").is_file(), "the launch failure was injected"
            yield DaemonCompile(home, key, (tmp_path / "failed-once").read_text(), seen_waiting,
                                (tmp_path / "daemon.log").read_text())
        finally:
            storages.close()


def test_a_step_that_failed_to_launch_is_retried_by_the_sensor_and_the_compile_ends(daemon_compile):
    home, key, failed_run = daemon_compile.home, daemon_compile.key, daemon_compile.failed_run
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    assert [d["reason"] for d in report["decisions"]] == ["target_improved_without_runtime_regression"], (
        daemon_compile.daemon_log[-3000:])
    seen_waiting = daemon_compile.seen_waiting
    assert seen_waiting and all("(attempt 2 of 3)" in w and failed_run in w for w in seen_waiting), seen_waiting
    assert "injected launch failure" in seen_waiting[0]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert any(f"{key}: waiting to retry iteration:" in r and failed_run in r for r in sensor_skip_reasons(instance))
        runs = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))]
    iterations = sorted((r.status.value, r.tags["dagster/run_key"]) for r in runs if r.job_name == "run_iteration")
    step_key = iterations[0][1].removesuffix(":1")
    assert iterations == [("FAILURE", step_key), ("SUCCESS", f"{step_key}:1")]
    assert compile_status(CompileHandle.open(home / "compiles", key)).state == "finalized"


def test_each_step_run_submits_the_next_and_no_step_runs_twice(daemon_compile):
    from dagster._daemon.sensor import fetch_existing_runs

    home, key = daemon_compile.home, daemon_compile.key
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = sorted(instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key})),
                         key=lambda r: r.create_timestamp)
        runs = [r.dagster_run for r in records]
        names = [r.job_name for r in runs]
        assert names[0] == "prepare_inputs" and names[-1] == "finalize" and "run_iteration" in names, names
        assert set(names) == {"prepare_inputs", "score_matrix", "run_iteration", "finalize"}  # one task: no task steps
        failed = [r for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
        assert [r.run_id for r in failed] == [daemon_compile.failed_run], [(r.job_name, r.status) for r in runs]
        assert all(r.tags.get(SENSOR_NAME_TAG) == LOOP_SENSOR for r in runs)
        # the sensor launched the first and the retry of the failed launch (a run key with an
        # attempt number); each other one was submitted by the run of the step before
        retry = [r.tags.get(SUBMITTED_BY_TAG) for r in runs if r.tags[RUN_KEY_TAG].endswith(":1")]
        assert retry == [None], retry
        chain = [(r.tags.get(SUBMITTED_BY_TAG), before.run_id) for before, r in zip(runs, runs[1:])
                 if not r.tags[RUN_KEY_TAG].endswith(":1")]
        assert SUBMITTED_BY_TAG not in runs[0].tags
        assert all(by == before for by, before in chain), next_step_lines(instance, runs, daemon_compile.daemon_log)
        # one run per run key: no step ran twice
        keys = Counter(r.tags[RUN_KEY_TAG] for r in runs)
        assert set(keys.values()) == {1}, keys
        # Dagster's lookup of the sensor's runs by run key finds the submitted runs too (same
        # run key, sensor name and repository as the sensor's own): its requests would be dropped.
        found = fetch_existing_runs(instance, loop_sensor(instance), [dg.RunRequest(run_key=k) for k in keys])
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
