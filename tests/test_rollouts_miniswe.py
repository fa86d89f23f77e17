"""The mini-swe-agent runner through a scripted OpenAI-compatible server (a real subprocess agent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.scripted_openai_server import ScriptedOpenAIServer

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.llm.client import ModelSettings
from deep_pipeline.rollouts import RolloutTask, make_runner

SKILL = "---\nname: writer\ndescription: Writes files.\n---\n# Writer\n\nWrite {{ the }} answer to out.txt.\n"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def bash(command: str, content: str = "") -> dict:
    return {"content": content, "tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


@pytest.fixture
def workspace(tmp_path: Path) -> dict:
    package = tmp_path / "skill"
    package.mkdir()
    (package / "SKILL.md").write_text(SKILL)
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    (task_dir / "notes.txt").write_text("the answer is hello\n")
    sandboxes = tmp_path / "sandboxes"
    sandboxes.mkdir()
    return {"package": package, "task_dir": task_dir, "archive": tmp_path / "raw", "sandboxes": sandboxes}


def run_batch(ws: dict, server: ScriptedOpenAIServer, n: int = 1, timeout_s: float = 120.0):
    config = CompileConfig(runner="mini-swe-agent", agent_model="openai/scripted-writer", rollout_timeout_s=timeout_s)
    runner = make_runner(config, agent_settings=ModelSettings(model="openai/scripted-writer", api_base=server.api_base),
                         sandbox_parent=ws["sandboxes"])
    task = RolloutTask(prompt="Write hello to out.txt", task_dir=ws["task_dir"], skill_name="writer")
    return runner.run_batch(package_dir=ws["package"], skill_sha256="sha", task=task, batch="input",
                            n=n, archive_dir=ws["archive"])


def test_agent_writes_a_file_in_its_workdir_and_the_trace_shows_it(workspace, monkeypatch):
    monkeypatch.setenv("DEEP_TEST_SECRET", "do-not-leak-5678")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-openai-key")
    turns = [
        bash("printf hello > out.txt && cat out.txt && ls skills/writer .claude/skills/writer", "Writing the file."),
        bash("env"),
        bash(SUBMIT),
    ]
    with ScriptedOpenAIServer(turns) as server:
        traces = run_batch(workspace, server, n=1)
    for trace in traces:
        assert trace.error_category is None, trace.error_reason
        assert (trace.agent, trace.model, trace.batch) == ("mini-swe-agent", "openai/scripted-writer", "input")
        commands = [json.loads(call.arguments)["command"] for step in trace.steps for call in step.tool_calls]
        assert commands == [turn["tool_calls"][0]["arguments"]["command"] for turn in turns]
        tool_steps = [step.text for step in trace.steps if step.source == "tool"]
        assert '"returncode": 0' in tool_steps[0] and "hello" in tool_steps[0]
        assert tool_steps[0].count("SKILL.md") == 2  # installed in both places
        # The agent's shell has neither the parent's secrets nor the model key ...
        assert "do-not-leak-5678" not in tool_steps[1] and "sk-parent-openai-key" not in tool_steps[1]
        assert "HOME=" + str(workspace["sandboxes"]) in tool_steps[1]
        assert trace.prompt_tokens == 150 and trace.completion_tokens == 30  # 3 scripted calls
        assert (trace.duration_s or 0) > 0
    # ... nor did the user's key travel to this self-hosted endpoint, and the
    # skill (braces and all) is in the system prompt.
    first = server.requests[0]
    assert first["authorization"] == "Bearer sk-local-no-key"
    assert "Write {{ the }} answer to out.txt." in first["body"]["messages"][0]["content"]
    archived = (workspace["archive"] / "0" / "trajectory.json").read_text()
    assert json.loads(archived)["info"]["exit_status"] == "Submitted"
    assert "sk-parent-openai-key" not in archived
    assert list(workspace["sandboxes"].iterdir()) == []


@pytest.mark.slow  # each worker pays litellm's import (4-10 s on 2 cores)
def test_api_failure_is_an_api_error_trace(workspace):
    with ScriptedOpenAIServer([{"status": 401, "error": "bad key"}]) as server:
        [trace] = run_batch(workspace, server)
    assert trace.error_category == "api_error"
    assert "AuthenticationError" in trace.error_reason


@pytest.mark.slow
def test_timeout_keeps_the_partial_trajectory_and_kills_the_running_command(workspace, tmp_path):
    marker = tmp_path / "still-running"
    # mini-swe-agent runs each command in a session of its own: only the rollout marker finds it.
    command = f"sleep 600 && touch {marker}"
    turns = [bash(command), bash(SUBMIT)]
    with ScriptedOpenAIServer(turns) as server:
        # The deadline counts the agent's start-up (litellm's import: 5 s quiet, over 12 s on a loaded
        # machine, when the command was never reached in CI27): room for it, and still far short of the sleep.
        [trace] = run_batch(workspace, server, timeout_s=45.0)
    assert trace.error_category == "timeout" and trace.timed_out
    commands = [json.loads(call.arguments)["command"] for step in trace.steps for call in step.tool_calls]
    assert commands == [command]  # the trajectory as saved on SIGTERM
    assert not [p for p in Path("/proc").glob("[0-9]*") if str(marker).encode() in _cmdline(p)]


def _cmdline(pid_dir: Path) -> bytes:
    try:
        return (pid_dir / "cmdline").read_bytes()
    except OSError:
        return b""
