"""The daemon path for real: `start_compile` registers, the Dagster daemon's loop sensor
carries the compile to its end in runs of their own processes. `compile_under_daemon` serves
tests/test_next_run.py (a compile of one task, its first iteration run failed to launch: the
chain of runs and the sensor's retry); here, a task set's (SPEC §11).

The judge and editor are a scripted OpenAI-compatible server on 127.0.0.1 (the runs are
other processes, so an in-process litellm provider cannot reach them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from tests.compile_world import make_inputs
from tests.scripted_openai_server import ScriptedOpenAIServer
from tests.served_world import answer_with, cli_env, one_edit_world, served_overrides

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def runs_ended(home: Path, key: str) -> bool:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))]
    return any(r.job_name == "finalize" for r in runs) and all(r.is_finished for r in runs)


def compile_under_daemon(tmp_path: Path, home: Path, env: dict[str, str], watch=None, timeout_s: float = 300,
                         task_set: bool = False) -> str:
    """Register a compile (`start_compile`, the scripted world's answers) and run `dagster-daemon`
    on `home` until every run of it ended; its key. `watch(key)` is called while it runs.
    `task_set`: two training tasks and a held-out one (SPEC §11), named by a task-set file."""
    skill, bundle = make_inputs(tmp_path)
    inputs = {"bundle": str(bundle)}
    if task_set:
        from tests.test_task_set_compile import PROMPTS, write_bundle

        base = json.loads(bundle.read_text())
        for name in ("release-notes", "retro"):
            write_bundle(tmp_path / f"{name}.json", base, name, PROMPTS[name])
        (tmp_path / "tasks.yaml").write_text(yaml.safe_dump([
            {"bundle": bundle.name, "split": "train"}, {"bundle": "release-notes.json", "split": "train"},
            {"bundle": "retro.json", "split": "holdout"}]))
        inputs = {"tasks": str(tmp_path / "tasks.yaml")}
    with ScriptedOpenAIServer([answer_with(one_edit_world())] * 100) as server:
        # A task set's compile stays on its section level: one matrix, one iteration (fewer runs to wait for).
        overrides = {**served_overrides(server), **({"section_iterations": 1, "paragraph_iterations": 0} if task_set else {})}
        config = {"ops": {"start_compile_op": {"config": {"skill_dir": str(skill), **inputs, "overrides": overrides}}}}
        (tmp_path / "compile.yaml").write_text(yaml.safe_dump(config))
        start = subprocess.run(
            [str(BIN / "dagster"), "job", "execute", "-m", "deep_pipeline.definitions", "-j", "start_compile", "-c", str(tmp_path / "compile.yaml")],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
        )
        assert start.returncode == 0, start.stderr[-2000:]
        (key,) = [p.name for p in (home / "compiles").iterdir()]
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "daemon.log", "w"), start_new_session=True,
        )
        try:
            deadline = time.monotonic() + timeout_s
            while not (home / "compiles" / key / "report.json").is_file() and time.monotonic() < deadline:
                if watch is not None:
                    watch(key)
                time.sleep(0.5)
            # report.json is written inside the finalize run: stopping the daemon now would
            # interrupt that run's last steps, so wait until every run of the compile ended.
            while not runs_ended(home, key) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=60)
    return key


@pytest.mark.slow
def test_the_daemon_runs_a_task_set_s_rollouts_as_one_run_per_task_requested_together(tmp_path, dagster_storage):
    """A task set registered from the UI's `start_compile` (a task-set file): each training task's
    candidate rollouts and matrix columns are runs of their own, asked for at once and outside the
    compile's run-queue lane, and the iteration finishes in a run after them (SPEC §11)."""
    home = dagster_storage.home(tmp_path / "home")
    key = compile_under_daemon(tmp_path, home, cli_env(home), task_set=True)
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    assert [(d["reason"], sorted(d["task_deltas"])) for d in report["decisions"]] == [
        ("target_improved_without_runtime_regression", ["release-notes", "status-update"])]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))]
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        records = {r.dagster_run.run_id: r for r in instance.get_run_records(dg.RunsFilter(job_name="roll_out_task"))}
    it = f"{key}/section/i00"
    tasks = [r for r in runs if r.job_name == "roll_out_task"]
    assert sorted(r.tags["dagster/partition"] for r in tasks) == [f"{it}/t0", f"{it}/t1"]
    assert not any("deep/queue" in r.tags for r in tasks)
    # Asked for together: the second was made before the first one ended (never one after the other).
    first_end = min(records[r.run_id].end_time for r in tasks)
    assert all(records[r.run_id].create_timestamp.timestamp() < first_end for r in tasks)
    assert sorted(r.tags.get("dagster/run_key") for r in runs if r.job_name == "run_iteration") == [
        f"iteration:{it}", f"iteration:{it}:after-rollouts"]
    # The matrices' columns likewise: one run per training task before each matrix's own run.
    columns = sorted(r.tags["dagster/partition"] for r in runs if r.job_name == "score_task_columns")
    assert columns == [f"{key}/section/m00/t0", f"{key}/section/m00/t1"]
    assert [r.job_name for r in runs].count("score_matrix") == 1

