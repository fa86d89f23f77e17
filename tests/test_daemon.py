"""The daemon path for real: `start_compile` registers, the Dagster daemon's loop sensor
carries the compile to its end in runs of their own processes. The judge and editor are a
scripted OpenAI-compatible server on 127.0.0.1 (the runs are other processes, so an in-process
litellm provider cannot reach them).

One compile serves the three tests here (a daemon compile is the suite's dearest set-up: a run
worker per step, the daemon, its code servers, a model worker): a task set of two training
tasks and a held-out one (SPEC §11), whose first `run_iteration` run fails to launch
(tests/fail_once_launcher.py, as a run whose code server timed out starting did). It shows:

- a task set's rollouts and columns are runs of their own, one per task, asked for together
  and outside the compile's run-queue lane, the iteration finishing in a run after them;
- a step whose run failed to launch is asked for again by the loop sensor (core/retry.py,
  runtime/run_history.py): the compile ends with the decisions of an undisturbed run, no
  `resume` typed, and while it waited the sensor's tick and `status` named it;
- each step run submits the compile's next step as it ends (runtime/next_run.py): the chain
  of runs, not the sensor's ticks, carries the compile. What shows it cannot depend on timing:
  every run but the first and the sensor's retry names in `deep/submitted_by` the run that ended
  the step before it (a task's runs, asked for together, name the same one; the step after
  them names the last of them to end), each run key has one run, and Dagster's own dedupe
  (`fetch_existing_runs`, the sensor daemon's lookup of a request's run key) finds every one
  of them as the loop sensor's, so a request of the sensor for any of those steps would be
  dropped. .ci/run's Postgres pass checks the chain on its batch under faults
  (tests/test_faults_under_load.py), not on a compile of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml

from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.status import compile_status
from deep_pipeline.runtime.tags import LOOP_SENSOR, QUEUE_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG, SUBMITTED_BY_TAG
from tests.compile_world import make_inputs
from tests.daemon_process import loop_sensor, running_daemon, sensor_skip_reasons
from tests.instances import Storages
from tests.scripted_openai_server import ScriptedOpenAIServer
from tests.served_world import answer_with, cli_env, one_edit_world, served_overrides

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def runs_ended(home: Path, key: str) -> bool:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))]
    return any(r.job_name == "finalize" for r in runs) and all(r.is_finished for r in runs)


def compile_under_daemon(tmp_path: Path, home: Path, env: dict[str, str], watch=None, timeout_s: float = 600) -> str:
    """Register a task set's compile (`start_compile` with a task-set file: two training tasks and
    a held-out one, SPEC §11; the scripted world's answers) and run `dagster-daemon` on `home`
    until every run of it ended; its key. `watch(key)` is called while it runs."""
    from tests.test_task_set_compile import PROMPTS, write_bundle

    skill, bundle = make_inputs(tmp_path)
    base = json.loads(bundle.read_text())
    for name in ("release-notes", "retro"):
        write_bundle(tmp_path / f"{name}.json", base, name, PROMPTS[name])
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump([
        {"bundle": bundle.name, "split": "train"}, {"bundle": "release-notes.json", "split": "train"},
        {"bundle": "retro.json", "split": "holdout"}]))
    inputs = {"tasks": str(tmp_path / "tasks.yaml")}
    with ScriptedOpenAIServer([answer_with(one_edit_world())] * 100) as server:
        # The compile stays on its section level: one matrix, one iteration (fewer runs to wait for).
        overrides = {**served_overrides(server), "section_iterations": 1, "paragraph_iterations": 0}
        config = {"ops": {"start_compile_op": {"config": {"skill_dir": str(skill), **inputs, "overrides": overrides}}}}
        (tmp_path / "compile.yaml").write_text(yaml.safe_dump(config))
        start = subprocess.run(
            [str(BIN / "dagster"), "job", "execute", "-m", "deep_pipeline.definitions", "-j", "start_compile", "-c", str(tmp_path / "compile.yaml")],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
        )
        assert start.returncode == 0, start.stderr[-2000:]
        (key,) = [p.name for p in (home / "compiles").iterdir()]
        with running_daemon(env, tmp_path / "daemon.log"):
            deadline = time.monotonic() + timeout_s
            while not (home / "compiles" / key / "report.json").is_file() and time.monotonic() < deadline:
                if watch is not None:
                    watch(key)
                time.sleep(0.5)
            # report.json is written inside the finalize run: stopping the daemon now would
            # interrupt that run's last steps, so wait until every run of the compile ended.
            while not runs_ended(home, key) and time.monotonic() < deadline:
                time.sleep(0.5)
    return key


@dataclass
class DaemonCompile:
    home: Path
    key: str
    failed_run: str  # the run whose launch was failed
    seen_waiting: list[str]  # `status`'s waiting lines while the compile waited
    daemon_log: str

    def records(self, instance: dg.DagsterInstance) -> list:
        """The compile's run records, oldest first."""
        return sorted(instance.get_run_records(dg.RunsFilter(tags={"deep/compile": self.key})),
                      key=lambda r: r.create_timestamp)


@pytest.fixture(scope="module")
def daemon_compile(tmp_path_factory):
    """A task set's compile carried by `dagster-daemon`, the first launch of its iteration's run failed."""
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


def test_the_daemon_runs_a_task_set_s_rollouts_as_one_run_per_task_requested_together(daemon_compile):
    """A task set registered from the UI's `start_compile` (a task-set file): each training task's
    candidate rollouts and matrix columns are runs of their own, asked for at once and outside the
    compile's run-queue lane, and the iteration finishes in a run after them (SPEC §11)."""
    home, key = daemon_compile.home, daemon_compile.key
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    assert [(d["reason"], sorted(d["task_deltas"])) for d in report["decisions"]] == [
        ("target_improved_without_runtime_regression", ["release-notes", "status-update"])], daemon_compile.daemon_log[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = {r.dagster_run.run_id: r for r in daemon_compile.records(instance)}
    runs = [r.dagster_run for r in records.values()]
    it = f"{key}/section/i00"
    tasks = [r for r in runs if r.job_name == "roll_out_task"]
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in tasks)
    assert sorted(r.tags["dagster/partition"] for r in tasks) == [f"{it}/t0", f"{it}/t1"]
    assert not any(QUEUE_TAG in r.tags for r in tasks)
    # Asked for together: the second was made before the first one ended (never one after the other).
    first_end = min(records[r.run_id].end_time for r in tasks)
    assert all(records[r.run_id].create_timestamp.timestamp() < first_end for r in tasks)
    assert sorted(r.tags[RUN_KEY_TAG] for r in runs if r.job_name == "run_iteration") == [
        f"iteration:{it}", f"iteration:{it}:1", f"iteration:{it}:after-rollouts"]  # :1, the failed launch's retry
    # The matrices' columns likewise: one run per training task before each matrix's own run.
    columns = sorted(r.tags["dagster/partition"] for r in runs if r.job_name == "score_task_columns")
    assert columns == [f"{key}/section/m00/t0", f"{key}/section/m00/t1"]
    assert [r.job_name for r in runs].count("score_matrix") == 1


def test_a_step_that_failed_to_launch_is_retried_by_the_sensor_and_the_compile_ends(daemon_compile):
    home, key, failed_run = daemon_compile.home, daemon_compile.key, daemon_compile.failed_run
    seen_waiting = daemon_compile.seen_waiting
    assert seen_waiting and all("(attempt 2 of 3)" in w and failed_run in w for w in seen_waiting), seen_waiting
    assert "injected launch failure" in seen_waiting[0]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert any(f"{key}: waiting to retry iteration:" in r and failed_run in r for r in sensor_skip_reasons(instance))
        runs = [r.dagster_run for r in daemon_compile.records(instance)]
    iterations = [(r.status.value, r.tags[RUN_KEY_TAG]) for r in runs if r.job_name == "run_iteration"]
    step_key = iterations[0][1]
    assert iterations[:2] == [("FAILURE", step_key), ("SUCCESS", f"{step_key}:1")], iterations
    assert [r.run_id for r in runs if r.status != dg.DagsterRunStatus.SUCCESS] == [failed_run]
    assert compile_status(CompileHandle.open(home / "compiles", key)).state == "finalized"


def test_each_step_run_submits_the_next_and_no_step_runs_twice(daemon_compile):
    from dagster._daemon.sensor import fetch_existing_runs

    with dg.DagsterInstance.from_config(str(daemon_compile.home)) as instance:
        records = daemon_compile.records(instance)
        runs = [r.dagster_run for r in records]
        names = [r.job_name for r in runs]
        assert names[0] == "prepare_inputs" and names[-1] == "finalize", names
        assert all(r.tags.get(SENSOR_NAME_TAG) == LOOP_SENSOR for r in runs)
        assert SUBMITTED_BY_TAG not in runs[0].tags  # the sensor launched the first
        assert chain_breaks(records) == [], next_step_lines(instance, runs, daemon_compile.daemon_log)
        # one run per run key: no step ran twice
        keys = Counter(r.tags[RUN_KEY_TAG] for r in runs)
        assert set(keys.values()) == {1}, keys
        # Dagster's lookup of the sensor's runs by run key finds the submitted runs too (same
        # run key, sensor name and repository as the sensor's own): its requests would be dropped.
        found = fetch_existing_runs(instance, loop_sensor(instance), [dg.RunRequest(run_key=k) for k in keys])
        assert {k: r.run_id for k, r in found.items()} == {r.tags[RUN_KEY_TAG]: r.run_id for r in runs}


def chain_breaks(records: list) -> list[str]:
    """The runs (oldest first) not submitted by the run that ended the step before them.

    A step is one run, or a task step's runs (consecutive runs of one job outside the run-queue
    lane), asked for together by one run; the run that ended a step of several runs is the last
    of them to end. The sensor's retry of a failed run (run key `<key>:<n>`) names no submitter.
    """
    breaks, before, i = [], [records[0]], 1
    while i < len(records):
        run = records[i].dagster_run
        if run.tags[RUN_KEY_TAG].rsplit(":", 1)[-1].isdigit():
            if SUBMITTED_BY_TAG in run.tags:
                breaks.append(f"{run.job_name} {run.tags[RUN_KEY_TAG]}: a retry submitted by a run")
            before, i = [records[i]], i + 1
            continue
        step = [records[i]]
        while (QUEUE_TAG not in run.tags and i + len(step) < len(records)
               and records[i + len(step)].dagster_run.job_name == run.job_name):
            step.append(records[i + len(step)])
        submitter = max(before, key=lambda r: r.end_time or 0).dagster_run.run_id
        breaks += [f"{r.dagster_run.job_name} {r.dagster_run.tags[RUN_KEY_TAG]}: submitted by "
                   f"{r.dagster_run.tags.get(SUBMITTED_BY_TAG)}, not {submitter}"
                   for r in step if r.dagster_run.tags.get(SUBMITTED_BY_TAG) != submitter]
        before, i = step, i + len(step)
    return breaks


def next_step_lines(instance: dg.DagsterInstance, runs: list, daemon_log: str) -> str:
    """What each run said about its next step, and the sensor's lines: why a link of the chain is missing."""
    lines = []
    for run in runs:
        said = [e.user_message for e in instance.all_logs(run.run_id)
                if "next step" in (e.user_message or "") or "deep-pipeline" in (e.user_message or "")]
        lines.append(f"{run.job_name} {run.run_id[:8]} submitted_by={run.tags.get(SUBMITTED_BY_TAG, '-')[:8]}: {said}")
    sensor = [line for line in daemon_log.splitlines() if "compile_loop" in line or "SensorDaemon" in line]
    return "\n".join(lines + sensor[-40:])
