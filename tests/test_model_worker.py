"""The model worker (llm/model_worker.py): a run process's sends made by one long-lived
process that imported litellm once, answered as litellm in-process would answer them.

The model is a scripted OpenAI-compatible server; the worker is the real process.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from deep_pipeline.llm.model_worker import WorkerTransport, fingerprint
from deep_pipeline.llm.transport import SendRequest
from tests.scripted_openai_server import ScriptedOpenAIServer


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-worker-key-000")
    yield tmp_path
    for state in (tmp_path / "model_worker").glob("*.json"):  # leave no worker behind
        try:
            os.kill(json.loads(state.read_text())["pid"], signal.SIGKILL)
        except (OSError, ValueError):
            pass


def request(server: ScriptedOpenAIServer, **extra) -> SendRequest:
    fields = {"model": "openai/judge", "api_base": server.api_base, "messages": [{"role": "user", "content": "hi"}],
              "timeout_s": 20, **extra}
    return SendRequest(**fields)


def worker_pid(home: Path) -> int:
    (state,) = (home / "model_worker").glob("*.json")
    return json.loads(state.read_text())["pid"]


def test_a_send_through_the_worker_answers_with_usage_and_later_sends_reuse_it(home):
    with ScriptedOpenAIServer([{"content": "hello", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}]) as server:
        first = WorkerTransport(home).send(request(server))
        pid = worker_pid(home)
        second = WorkerTransport(home).send(request(server))  # another client object, as the next run makes
    assert (first.content, first.prompt_tokens, first.completion_tokens, first.error) == ("hello", 7, 3, None)
    assert second.content == "hello" and worker_pid(home) == pid != os.getpid()
    assert len(server.requests) == 2
    assert server.requests[0]["authorization"] == "Bearer sk-test-worker-key-000"  # the environment's key, read there
    (state,) = (home / "model_worker").glob("*.json")
    assert stat.S_IMODE(state.stat().st_mode) == 0o600  # it holds the authentication key


def test_a_killed_worker_is_replaced_on_the_next_send(home):
    with ScriptedOpenAIServer([{"content": "ok"}]) as server:
        transport = WorkerTransport(home)
        transport.send(request(server))
        old = worker_pid(home)
        os.kill(old, signal.SIGKILL)
        wait_gone(old)
        again = transport.send(request(server))
    assert again.content == "ok" and worker_pid(home) != old


def test_failures_come_back_classified_as_in_process(home):
    turns = [lambda body: {"status": 401, "error": "bad key"} if "refuse" in json.dumps(body) else {"status": 503, "error": "busy"}]
    with ScriptedOpenAIServer(turns) as server:
        transport = WorkerTransport(home)
        refused = transport.send(request(server, messages=[{"role": "user", "content": "refuse"}]))
        busy = transport.send(request(server))
    assert refused.failure == "access", refused.error
    assert refused.key_variable == "OPENAI_API_KEY" and refused.access_problem == "credentials refused"
    assert busy.failure == "transient" and busy.content is None


def test_another_key_gets_another_worker(home, monkeypatch):
    first = fingerprint()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-another-key-111")
    assert fingerprint() != first  # a worker never sends with a stale environment's key
    monkeypatch.setenv("PATH", os.environ["PATH"] + ":/nowhere")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-another-key-111")
    assert fingerprint() == fingerprint()


def test_an_idle_worker_exits_and_removes_its_state(home, monkeypatch):
    monkeypatch.setenv("DEEP_PIPELINE_MODEL_WORKER_IDLE_S", "1")
    with ScriptedOpenAIServer([{"content": "ok"}]) as server:
        WorkerTransport(home).send(request(server))
        pid = worker_pid(home)
    deadline = time.monotonic() + 15
    while list((home / "model_worker").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not list((home / "model_worker").glob("*.json"))
    wait_gone(pid)


def gone(pid: int) -> bool:
    """No such process, or a zombie this test process has not reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_gone(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not gone(pid):
        assert time.monotonic() < deadline, f"process {pid} still running after {timeout:.0f} s"
        time.sleep(0.02)


def test_a_chat_rollouts_deadline_starts_once_the_worker_is_up(home, tmp_path):
    # Issue 21 item 10: a Dagster run's first send starts the model worker (litellm's import,
    # 3 s measured here); that is the machinery's start-up, not the agent's 2 s.
    from deep_pipeline.llm.client import ModelClient, ModelSettings
    from deep_pipeline.rollouts.base import RolloutTask
    from deep_pipeline.rollouts.chat import ChatRunner

    package = tmp_path / "skill"
    package.mkdir()
    (package / "SKILL.md").write_text("---\nname: haiku\ndescription: Writes haiku.\n---\n# Haiku\n\nCount 5-7-5.\n")
    with ScriptedOpenAIServer([{"content": "rain on the roof"}]) as server:
        runner = ChatRunner(lambda: ModelClient(ModelSettings(model="openai/agent", api_base=server.api_base), "agent",
                                                transport=WorkerTransport(home)), timeout_s=2.0)
        [trace] = runner.run_batch(package_dir=package, skill_sha256="sha", batch="input", n=1,
                                   task=RolloutTask(prompt="Write a haiku.", skill_name="haiku"),
                                   archive_dir=tmp_path / "raw")
    assert (trace.error_category, trace.final_output) == (None, "rain on the roof")
