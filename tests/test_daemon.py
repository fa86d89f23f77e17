"""The daemon path for real: `start_compile` registers, the Dagster daemon's loop sensor
carries the compile to its end in runs of their own processes.

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


def compile_under_daemon(tmp_path: Path, home: Path, env: dict[str, str], watch=None, timeout_s: float = 300) -> str:
    """Register a compile (`start_compile`, the scripted world's answers) and run `dagster-daemon`
    on `home` until every run of it ended; its key. `watch(key)` is called while it runs."""
    skill, bundle = make_inputs(tmp_path)
    with ScriptedOpenAIServer([answer_with(one_edit_world())] * 50) as server:
        overrides = served_overrides(server)
        config = {"ops": {"start_compile_op": {"config": {"skill_dir": str(skill), "bundle": str(bundle), "overrides": overrides}}}}
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
def test_the_daemon_carries_a_registered_compile_to_its_end(tmp_path, dagster_storage):
    home = dagster_storage.home(tmp_path / "home")  # our dagster.yaml
    key = compile_under_daemon(tmp_path, home, cli_env(home))
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    assert [d["reason"] for d in report["decisions"]] == ["target_improved_without_runtime_regression"]
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with dg.DagsterInstance.get() as instance:
            runs = instance.get_run_records(dg.RunsFilter(tags={"deep/compile": key}))
            assert {r.dagster_run.job_name for r in runs} == {"prepare_inputs", "score_matrix", "run_iteration", "finalize"}
            assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in runs)
            assert len({r.dagster_run.tags.get("dagster/run_key") for r in runs}) == len(runs)  # no step twice
    finally:
        del os.environ["DAGSTER_HOME"]
