"""SPEC §9: a run or a pool slot held by a dead process is released before the next step.

`kill -9` of `deep-pipeline compile` inside a model call leaves its Dagster run STARTED
and its `llm` slot claimed; two such kills used to take both slots of the pool for good,
so every later model-calling step waited forever. The model is a scripted
OpenAI-compatible server (the CLI is another process); it holds one chosen request
open, which is where the test kills the driver.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import dagster as dg
import pytest
import yaml

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import StepContext
from deep_pipeline.engine.driver import run_inline
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.scripted_llm import scripted_llm  # noqa: F401  (fixture)
from tests.scripted_openai_server import ScriptedOpenAIServer
from tests.test_daemon import _Request, answer_with

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "deep-pipeline"
IN_FLIGHT = (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING)


def world() -> World:
    return World(low={("s02-steps", "clarity"): 2})


class KillPoint:
    """Answers from the world, but holds the first request of the armed role open.

    A held request is never answered (the world does not count it: a call lost with
    its driver) unless `answer_held`, when it gets its answer once released.
    """

    def __init__(self, world: World, answer_held: bool = False):
        self.answer = answer_with(world)
        self.answer_held = answer_held
        self.armed: str | None = None
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def arm(self, role: str) -> None:
        self.arrived.clear()
        self.release.clear()
        self.armed = role

    def __call__(self, body: dict) -> dict:
        role = "editor" if "new_text" in (_Request(body).schema or {}).get("properties", {}) else "judge"
        with self._lock:
            hold, self.armed = (self.armed == role), (None if self.armed == role else self.armed)
        if hold:
            self.arrived.set()
            self.release.wait(60)
            if not self.answer_held:
                return {"status": 503, "error": "the caller is gone"}
        return self.answer(body)


def kill_inside(gate: KillPoint, role: str, args: list[str], env: dict) -> str:
    gate.arm(role)
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert gate.arrived.wait(120), f"no {role} request arrived"
        proc.send_signal(signal.SIGKILL)  # the driver only, as `kill -9 PID` does
        out, _ = proc.communicate(timeout=30)
    finally:
        gate.release.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever helper it left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL
    return out


def reference(tmp_path: Path, scripted_llm) -> tuple[list, str, int]:
    """The same world, uninterrupted, on the plain driver: (decisions, S_final's SKILL.md, model calls)."""
    install_world(scripted_llm, world())
    skill, bundle = make_inputs(tmp_path / "ref")
    record = register_compile(tmp_path / "ref" / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    ctx = StepContext.open(tmp_path / "ref" / "store", record.key)
    report = run_inline(ctx)
    decisions = [(d.level, str(d.coordinate), d.accepted, d.reason) for d in report.decisions]
    return decisions, (Path(report.final_skill_dir) / "SKILL.md").read_text(), len(scripted_llm.requests)


@pytest.mark.slow
def test_two_kills_in_model_calls_leave_no_run_started_and_no_slot_claimed(tmp_path, scripted_llm):
    expected, expected_skill, _ = reference(tmp_path, scripted_llm)
    home = tmp_path / "home"  # a new home: the CLI gives it our dagster.yaml (the llm pool of 2)
    skill, bundle = make_inputs(tmp_path)
    env = {**os.environ, "DAGSTER_HOME": str(home), "OPENAI_API_KEY": "sk-test-dummy-key"}
    env.pop("DEEP_PIPELINE_STORE", None)
    gate = KillPoint(world())
    with ScriptedOpenAIServer([gate] * 50) as server:
        config = {"judge_model": "openai/judge", "judge_api_base": server.api_base, "editor_model": "openai/editor",
                  "editor_api_base": server.api_base, "runner": "replay", "rollouts": 2}
        (tmp_path / "compile.yaml").write_text(yaml.safe_dump(config))
        compile_args = [str(CLI), "compile", str(skill), "--task", str(bundle), "--config", str(tmp_path / "compile.yaml")]
        kill_inside(gate, "judge", compile_args, env)  # in the first matrix's columns
        (key,) = [p.name for p in (home / "compiles").iterdir()]
        resumed = kill_inside(gate, "editor", [str(CLI), "resume", key], env)  # in the first iteration's edit
        # Before the fix both llm slots stayed claimed here and this resume waited forever.
        done = subprocess.run([str(CLI), "resume", key], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    # Each resume first released the run the kill before it left (one line each).
    assert resumed.count("released run") == 1 and "(score_matrix" in resumed, resumed
    assert done.stdout.count("released run") == 1 and "(run_iteration" in done.stdout, done.stdout
    report = json.loads((home / "compiles" / key / "report.json").read_text())
    decisions = [(d["level"], f"{d['coordinate']['unit_id']}/{d['coordinate']['dimension']}", d["accepted"], d["reason"])
                 for d in report["decisions"]]
    assert decisions == expected
    assert (Path(report["final_skill_dir"]) / "SKILL.md").read_text() == expected_skill

    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_run_records(dg.RunsFilter(statuses=list(IN_FLIGHT))) == []
        failed = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        assert {r.dagster_run.job_name for r in failed} == {"score_matrix", "run_iteration"}
        info = instance.event_log_storage.get_concurrency_info("llm")
        assert info.claimed_slots == [] and info.pending_steps == []


@pytest.mark.slow
def test_ctrl_c_in_a_model_call_prints_one_line(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: no helper of Dagster's may print a traceback."""
    skill, bundle = make_inputs(tmp_path)
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": "sk-test-dummy-key"}
    env.pop("DEEP_PIPELINE_STORE", None)
    gate = KillPoint(world())
    with ScriptedOpenAIServer([gate] * 50) as server:
        config = {"judge_model": "openai/judge", "judge_api_base": server.api_base, "editor_model": "openai/editor",
                  "editor_api_base": server.api_base, "runner": "replay", "rollouts": 2}
        (tmp_path / "compile.yaml").write_text(yaml.safe_dump(config))
        gate.arm("judge")
        proc = subprocess.Popen([str(CLI), "compile", str(skill), "--task", str(bundle), "--config", str(tmp_path / "compile.yaml")],
                                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            assert gate.arrived.wait(120), "no judge request arrived"
            os.killpg(proc.pid, signal.SIGINT)
            threading.Timer(0.5, gate.release.set).start()  # the call in flight ends; the driver stops
            _, err = proc.communicate(timeout=60)
        finally:
            gate.release.set()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert err.splitlines() == ["deep-pipeline: interrupted; run the same command again to resume"]

WARNING = "this Dagster instance has no limit on the 'llm' pool"


def drive_first_step(tmp_path: Path, instance: dg.DagsterInstance, monkeypatch) -> None:
    from deep_pipeline.definitions import defs
    from deep_pipeline.defs.launcher import drive
    from deep_pipeline.errors import StepError

    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))  # where the assets' store resource looks
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    with pytest.raises(StepError, match="no end after 1 runs"):
        drive(instance, tmp_path / "store", record.key, defs, max_runs=1)


def test_the_first_step_on_an_instance_without_our_limits_warns_once_naming_the_file(tmp_path, scripted_llm, capsys, monkeypatch):
    install_world(scripted_llm, world())
    drive_first_step(tmp_path, dg.DagsterInstance.ephemeral(), monkeypatch)  # Dagster's defaults: no dagster.yaml
    lines = [line for line in capsys.readouterr().err.splitlines() if WARNING in line]
    assert len(lines) == 1
    assert "deep/compile" in lines[0] and str(REPO / "dagster_home" / "dagster.yaml") in lines[0]


def test_an_instance_with_our_dagster_yaml_gets_no_warning(tmp_path, scripted_llm, capsys, monkeypatch):
    install_world(scripted_llm, world())
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_bytes((REPO / "dagster_home" / "dagster.yaml").read_bytes())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        drive_first_step(tmp_path, instance, monkeypatch)
    assert "warning" not in capsys.readouterr().err
