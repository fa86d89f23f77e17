"""A step whose run fails to launch is asked for again by the loop sensor under the real daemon
(core/retry.py, runtime/run_history.py): the compile ends with the decisions of an undisturbed run,
no `resume` typed, and while it waited the sensor's tick and `status` named it.

The failure is the launcher's (tests/fail_once_launcher.py): the first run of `run_iteration`
fails before any step body runs, as a run whose code server timed out starting did.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest
import yaml

from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.status import compile_status
from tests.served_world import cli_env
from tests.test_daemon import compile_under_daemon

REPO = Path(__file__).resolve().parents[1]


def sensor_skip_reasons(instance: dg.DagsterInstance) -> list[str]:
    from dagster._core.scheduler.instigation import InstigatorType

    (state,) = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
                if s.instigator_name == "compile_loop"]
    return [t.skip_reason or "" for t in instance.get_ticks(state.instigator_origin_id, state.selector_id)]


@pytest.mark.slow
def test_a_step_that_failed_to_launch_is_retried_by_the_sensor_and_the_compile_ends(tmp_path, dagster_storage):
    home = dagster_storage.home(tmp_path / "home")
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
    log = (tmp_path / "daemon.log").read_text()
    assert (tmp_path / "failed-once").is_file(), "the launch failure was injected"
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    assert [d["reason"] for d in report["decisions"]] == ["target_improved_without_runtime_regression"], log[-3000:]
    failed_run = (tmp_path / "failed-once").read_text()
    assert seen_waiting and all("(attempt 2 of 3)" in w and failed_run in w for w in seen_waiting), seen_waiting
    assert "injected launch failure" in seen_waiting[0]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert any(f"{key}: waiting to retry iteration:" in r and failed_run in r for r in sensor_skip_reasons(instance))
        runs = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))]
    iterations = sorted((r.status.value, r.tags["dagster/run_key"]) for r in runs if r.job_name == "run_iteration")
    step_key = iterations[0][1].removesuffix(":1")
    assert iterations == [("FAILURE", step_key), ("SUCCESS", f"{step_key}:1")]
    assert compile_status(CompileHandle.open(home / "compiles", key)).state == "finalized"
