"""The agent's deadline and the models' per-call timeouts count only the model's own time
(SPEC §9): the compiler's start-up, a queue for the
local model's one slot and a hung request are the machinery's, never the agent's timeout."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time

import pytest
import yaml

from deep_pipeline.cli import main
from deep_pipeline.errors import StepError
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.llm import client
from deep_pipeline.llm.client import ModelClient, ModelSettings
from tests.compile_world import CONFIG, MARK, World, install_world, make_inputs
from tests.scripted_llm import slow
from tests.scripted_openai_server import ScriptedOpenAIServer
from tests.served_world import CLI, answer_with, served_compile


def agent_or_world(world: World, candidate_s: float):
    """The judge and editor from `world`; the agent answers at once on S_fast, in `candidate_s` on an edit."""
    world_answer = answer_with(world)

    def turn(body: dict) -> dict:
        if body.get("response_format"):
            return world_answer(body)
        if MARK in body["messages"][0]["content"]:
            time.sleep(candidate_s)
        return {"content": "- shipped the parser"}

    return turn


def test_a_resumed_cli_compile_counts_no_start_up_against_a_two_second_rollout_timeout(tmp_path):
    # Issue 21 item 10: the first model call of a fresh process pays litellm's import (4-5 s
    # here); it is not the agent's time, so S_fast's answers at once are traces and only the
    # slow candidates are timeouts: the reference's decisions (test_rollouts_chat_timeout).
    world = World(low={("s01-when-to-use", "clarity"): 2})
    home = tmp_path / "home"
    with served_compile(tmp_path, home, agent_or_world(world, 4.0)) as served:
        config = {**served.config, "runner": "chat", "rollout_timeout_s": 2, "agent_model": "openai/agent",
                  "agent_api_base": served.server.api_base}
        # Registered here, run by a fresh process: nothing there has imported litellm yet.
        record = register_compile(home / "compiles", served.skill, served.bundle,
                                  effective_config(load_deployment(), config))
        done = subprocess.run([str(CLI), "resume", record.key, "--quiet"], env=served.env, capture_output=True,
                              text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    ctx = CompileHandle.open(home / "compiles", record.key)
    assert [t.error_category for t in ctx.cdir.traces("input")] == [None, None]
    report = json.loads((ctx.cdir.path / "report.json").read_text())
    assert [d["reason"] for d in report["decisions"]] == ["runtime_regressed:timeout"] * 2


def compile_args(tmp_path, **extra) -> list[str]:
    config = tmp_path / "compile.yaml"
    if not (tmp_path / "inputs").exists():
        make_inputs(tmp_path / "inputs")
    config.write_text(yaml.safe_dump({**CONFIG, "section_iterations": 1, "paragraph_iterations": 0, **extra}))
    skill, bundle = tmp_path / "inputs" / "skills" / "demo-skill", tmp_path / "inputs" / "bundle.json"
    return ["compile", str(skill), "--task", str(bundle), "--config", str(config), "--quiet"]


def test_a_judge_timeout_names_its_setting_and_raising_it_carries_the_same_compile_on(
        tmp_path, monkeypatch, capsys, scripted_llm):
    # Issue 21 item 11: the per-call timeout is a setting per role, named in the failure line;
    # it is not the compile's identity, so the same command with it raised resumes the compile.
    monkeypatch.setattr(client, "RETRIES", 1)
    monkeypatch.setattr(client, "BACKOFF_S", 0.0)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    world = World(low={("s02-steps", "clarity"): 2})
    install_world(scripted_llm, world)
    scripted_llm.always("judge", slow(5.0))  # every judge call stalls past its 0.3 s

    assert main(compile_args(tmp_path, judge_timeout_s=0.3)) == 1  # a step failed
    first = capsys.readouterr().err.strip()
    assert len(first.splitlines()) == 1 and "failed 2 times" in first
    assert "0.3 s (judge_timeout_s)" in first and "raise judge_timeout_s" in first
    (folder,) = (tmp_path / "home" / "compiles").iterdir()
    # A resume after the forced timeout names the setting too.
    assert main(["resume", folder.name, "--quiet"]) == 1
    assert "raise judge_timeout_s" in capsys.readouterr().err

    install_world(scripted_llm, world)  # the judge answers again, in its time
    assert main(compile_args(tmp_path, judge_timeout_s=30)) == 0
    assert [p.name for p in (tmp_path / "home" / "compiles").iterdir()] == [folder.name]
    stored = json.loads((folder / "compile.json").read_text())["config"]
    assert stored["judge_timeout_s"] == 30 and (folder / "report.json").is_file()


def test_resume_takes_operational_settings_only(tmp_path, monkeypatch, capsys, scripted_llm):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    install_world(scripted_llm, World())
    scripted_llm.always("judge", slow(5.0))
    monkeypatch.setattr(client, "RETRIES", 0)
    assert main(compile_args(tmp_path, judge_timeout_s=0.2)) == 1
    (folder,) = (tmp_path / "home" / "compiles").iterdir()
    capsys.readouterr()
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"rollouts": 5}))
    assert main(["resume", folder.name, "--config", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(other) in err and "rollouts" in err and "judge_timeout_s" in err and len(err.splitlines()) == 1
    install_world(scripted_llm, World())
    other.write_text(yaml.safe_dump({"judge_timeout_s": 20, "editor_timeout_s": 40}))
    assert main(["resume", folder.name, "--config", str(other), "--quiet"]) == 0
    stored = json.loads((folder / "compile.json").read_text())["config"]
    assert (stored["judge_timeout_s"], stored["editor_timeout_s"]) == (20, 40)


def test_a_matrix_step_stops_at_its_first_failed_column(tmp_path, monkeypatch, capsys, scripted_llm):
    # Issue 21 item 17: a failed column fails the step at once; the columns not yet sent are
    # not sent (the demo ran ~10 more minutes of doomed columns before its error line).
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    install_world(scripted_llm, World())
    scripted_llm.always("judge", "not JSON")  # every column: 3 invalid answers, then AnswerError
    assert main(compile_args(tmp_path, parallel=1)) == 1
    assert "gave no valid answer in 3 attempts" in capsys.readouterr().err
    assert len(scripted_llm.requests_for("judge")) == 3  # one column's attempts, not five columns'


def test_a_long_wait_beats_a_heartbeat_line_without_a_terminal(tmp_path, monkeypatch, capsys, scripted_llm):
    # Issue 21 item 17: `make demo` pipes through tee: no live line, but a heartbeat naming the
    # column, the matrix and what it waits on, so a slow step does not look hung.
    from deep_pipeline.engine import live

    monkeypatch.setattr(live, "HEARTBEAT_S", 0.2)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    world = World(low={("s02-steps", "clarity"): 2})
    install_world(scripted_llm, world)
    first_column, first_edit = threading.Event(), threading.Event()

    def slow_first(event, answer):
        def answer_slowly(request):
            if not event.is_set():  # the first call takes a while; the others answer at once
                event.set()
                time.sleep(1.0)
            return answer(request)
        return answer_slowly

    scripted_llm.always("judge", slow_first(first_column, world.judge))
    scripted_llm.always("editor", slow_first(first_edit, world.editor))
    args = [a for a in compile_args(tmp_path, parallel=1) if a != "--quiet"]
    assert main(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "waiting on" in line]
    assert lines and all("\x1b" not in line for line in lines)
    assert re.fullmatch(r"  column 1/5 of demo-skill-\w+/section/m00 waiting on scripted/judge, \d+ s", lines[0])
    assert any(re.fullmatch(r"  the edit of demo-skill-\w+/section/i00 waiting on scripted/editor, \d+ s", line)
               for line in lines), lines
    # ... and in the Dagster event log of the step's run, which said nothing for 20 minutes before.
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        logged = [event.user_message for run in instance.get_runs() for event in instance.all_logs(run.run_id)]
    assert any(re.fullmatch(r"column 1/5 of demo-skill-\w+/section/m00 waiting on scripted/judge, \d+ s", m)
               for m in logged)


def test_the_local_models_one_slot_queues_callers(tmp_path):
    # Issue 21 item 17: the embedded server serves one request at a time; a second caller
    # waits for the slot before its request (and its timeout) starts, not inside the server.
    from deep_pipeline.llm.local_model import local_slot

    holding, entered, release = threading.Event(), threading.Event(), threading.Event()

    def first():
        with local_slot(tmp_path):
            holding.set()
            release.wait(30)

    def second():
        holding.wait(30)
        with local_slot(tmp_path):
            entered.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    assert holding.wait(30) and not entered.wait(0.3)  # queued while the first holds the slot
    release.set()
    assert entered.wait(30)
    for thread in threads:
        thread.join()


def test_a_slow_rollout_beats_a_heartbeat_line(
        tmp_path, monkeypatch, capsys, scripted_llm):
    from deep_pipeline.engine import live

    monkeypatch.setattr(live, "HEARTBEAT_S", 0.2)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DEEP_PIPELINE_STORE", raising=False)
    install_world(scripted_llm, World())
    scripted_llm.always("agent", slow(1.0, "- shipped the parser"))
    args = [a for a in compile_args(tmp_path, runner="chat", section_iterations=0) if a != "--quiet"]
    assert main(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "waiting on" in line]
    assert any(re.fullmatch(r"  rollout [12]/2 of input waiting on the agent, \d+ s", line) for line in lines), lines


def test_each_roles_client_gets_its_timeout_the_local_model_a_slow_cpus(tmp_path, scripted_llm):
    # Issue 21 item 11: per role; unset, 900 s for the embedded model and 120 s for a hosted one.
    from deep_pipeline.engine.services import build_services

    skill, bundle = make_inputs(tmp_path)
    overrides = {**CONFIG, "judge_model": "local", "editor_timeout_s": 45, "runner": "chat"}
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), overrides))
    services = build_services(CompileHandle.open(tmp_path / "store", record.key).cdir, record)
    assert (services.judge.settings.timeout_s, services.judge.settings.timeout_setting) == (900, "judge_timeout_s")
    assert (services.editor.settings.timeout_s, services.editor.settings.timeout_setting) == (45, "editor_timeout_s")
    agent = services.runner.model_client()
    assert (agent.settings.timeout_s, agent.settings.timeout_setting) == (120, "agent_timeout_s")
    # The timeouts are not the compile's identity: the same inputs with others are the same compile.
    again = register_compile(tmp_path / "store", skill, bundle,
                             effective_config(load_deployment(), {**overrides, "judge_timeout_s": 1200}))
    assert again.key == record.key and again.config.judge_timeout_s == 1200


def test_a_retry_after_beyond_the_cap_fails_the_call_at_once(monkeypatch):
    # Issue 21 item 31 (the client's part): a provider asking for more than 60 s is out; the
    # README says the step fails with one line (a resume carries on), and so it does.
    monkeypatch.setenv("DEEP_PIPELINE_MODEL_WORKER", "0")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy-key")
    sent: list[float] = []

    def turn(body: dict) -> dict:
        sent.append(time.monotonic())
        if len(sent) == 1:
            return {"status": 429, "error": "slow down", "headers": {"Retry-After": "120"}}
        return {"content": "ok"}

    with ScriptedOpenAIServer([turn]) as server:
        judge = ModelClient(ModelSettings(model="openai/judge", api_base=server.api_base), "judge", backoff_s=0.001)
        with pytest.raises(StepError) as failed:
            judge.complete("k/judge/1", [{"role": "user", "content": "hi"}])
    assert len(sent) == 1 and "asked to wait 120 s (Retry-After), more than 60 s" in str(failed.value)
