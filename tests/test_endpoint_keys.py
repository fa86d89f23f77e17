"""A key goes only to the endpoint it belongs to.

With the user's OPENAI_API_KEY in the environment and every role on a self-hosted
`*_api_base` endpoint, the endpoints (scripted OpenAI-compatible servers that log the
Authorization header) never see that key: each gets the placeholder, or exactly the
value of the variable its `<role>_api_key_env` names, and no value lands on disk.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_steps, run_step
from deep_pipeline.errors import InputError, StepError
from deep_pipeline.llm.access import PLACEHOLDER_KEY
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.rollouts import RolloutTask, make_runner
from tests.compile_world import make_inputs
from tests.scripted_openai_server import ScriptedOpenAIServer
from tests.served_world import answer_with, one_edit_world

USER_KEY = "sk-the-users-own-openai-key-0001"
VLLM_KEY = "vllm-endpoint-key-0002"


@pytest.fixture
def served(env, monkeypatch):
    """Judge and editor on one server, the chat agent on another; the user's key in the environment."""
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    monkeypatch.setenv("DEEP_PIPELINE_MODEL_WORKER", "0")
    with ScriptedOpenAIServer([answer_with(one_edit_world())] * 50) as models, \
            ScriptedOpenAIServer([{"content": "- shipped the parser"}]) as agent:
        yield env, models, agent


def compile_on(tmp: Path, models: ScriptedOpenAIServer, agent: ScriptedOpenAIServer, api_keys=None, **keys) -> Path:
    """Run a whole compile, every role on a served endpoint; returns its folder (`api_keys`: what
    Dagster's ProviderKeysResource hands a step)."""
    overrides = {"judge_model": "openai/judge", "judge_api_base": models.api_base,
                 "editor_model": "openai/editor", "editor_api_base": models.api_base,
                 "agent_model": "openai/agent", "agent_api_base": agent.api_base,
                 "runner": "chat", "rollouts": 2, **keys}
    skill, bundle = make_inputs(tmp)
    record = register_compile(tmp / "store", skill, bundle, effective_config(load_deployment(), overrides))
    run_steps(CompileHandle.open(tmp / "store", record.key, api_keys=api_keys), run_step)
    return tmp / "store" / record.key


def bearers(server: ScriptedOpenAIServer) -> set[str]:
    return {request["authorization"] for request in server.requests}


def files_holding(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.parametrize("handed_over", [None, {"openai": USER_KEY}], ids=["environment", "dagster-resource"])
def test_self_hosted_endpoints_never_see_the_users_provider_key(served, handed_over):
    tmp, models, agent = served
    compile_on(tmp, models, agent, api_keys=handed_over)
    assert models.requests and agent.requests
    assert bearers(models) == bearers(agent) == {f"Bearer {PLACEHOLDER_KEY}"}


def test_a_role_that_names_its_key_variable_sends_exactly_that_value(served, monkeypatch):
    tmp, models, agent = served
    monkeypatch.setenv("MY_VLLM_KEY", VLLM_KEY)
    folder = compile_on(tmp, models, agent, judge_api_key_env="MY_VLLM_KEY")
    judge = {r["authorization"] for r in models.requests if "new_text" not in str(r["body"].get("response_format"))}
    editor = bearers(models) - judge
    assert judge == {f"Bearer {VLLM_KEY}"}
    assert editor == bearers(agent) == {f"Bearer {PLACEHOLDER_KEY}"}
    assert '"judge_api_key_env": "MY_VLLM_KEY"' in (folder / "compile.json").read_text()  # the name, never the value
    assert files_holding(tmp, VLLM_KEY) == files_holding(tmp, USER_KEY) == []


def test_the_key_variable_is_operational_not_identity():
    named = CompileConfig(judge_api_key_env="MY_VLLM_KEY").identity_settings()
    assert named == CompileConfig().identity_settings()


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_key_variable_is_refused_at_registration(tmp_path, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("MY_VLLM_KEY", raising=False)
    else:
        monkeypatch.setenv("MY_VLLM_KEY", value)
    skill, bundle = make_inputs(tmp_path)
    config = CompileConfig(judge_model="openai/judge", judge_api_base="http://127.0.0.1:9/v1", judge_api_key_env="MY_VLLM_KEY",
                           editor_model="local", runner="replay")
    with pytest.raises(InputError, match=r"^config: judge_api_key_env: MY_VLLM_KEY is not set"):
        register_compile(tmp_path / "store", skill, bundle, config)
    assert not (tmp_path / "store").exists()


def test_a_key_variable_without_an_endpoint_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_VLLM_KEY", VLLM_KEY)
    skill, bundle = make_inputs(tmp_path)
    config = CompileConfig(editor_model="local", judge_model="local", judge_api_key_env="MY_VLLM_KEY", runner="replay")
    with pytest.raises(InputError, match=r"^config: judge_api_key_env: names the key of judge_api_base, which is not set"):
        register_compile(tmp_path / "store", skill, bundle, config)


def test_a_key_variable_must_be_a_name_not_a_value():
    with pytest.raises(ValueError, match="editor_api_key_env"):
        CompileConfig(editor_api_key_env="sk-abc/123=")


# -- item 27: what an access error against a self-hosted endpoint tells to set ----------------


def refused(tmp_path, **settings) -> str:
    # As some servers do, the refusal quotes the key it was sent.
    echo = f"Incorrect API key provided: {settings.get('api_key') or PLACEHOLDER_KEY}"
    with ScriptedOpenAIServer([{"status": 401, "error": echo}]) as server:
        client = ModelClient(ModelSettings(model="openai/served", api_base=server.api_base, **settings), "judge",
                             cache_dir=tmp_path / "cache", calls_log=tmp_path / "calls.jsonl", retries=0)
        with pytest.raises(StepError) as failure:
            client.complete("k", [{"role": "user", "content": "hi"}])
    return str(failure.value)


def test_an_access_error_at_an_endpoint_names_the_roles_key_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    monkeypatch.setenv("DEEP_PIPELINE_MODEL_WORKER", "0")
    line = refused(tmp_path)
    assert "set judge_api_key_env to the name of a variable" in line and "judge_api_base" in line
    assert "OPENAI_API_KEY" not in line
    # A variable whose name does not look secret: its value is still blanked out of the line and the calls log.
    named = refused(tmp_path, api_key="wrong-endpoint-key-1", api_key_env="VLLM_AUTH")
    assert "set VLLM_AUTH (named by judge_api_key_env)" in named and "wrong-endpoint-key-1" not in named
    assert "<redacted>" in named and "wrong-endpoint-key-1" not in (tmp_path / "calls.jsonl").read_text()


# -- a subprocess agent on a self-hosted endpoint ----------------------------------------------

# An agent CLI in miniature: one chat completion to the endpoint its environment names.
AGENT = """
import json, os, urllib.request
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "agent", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""), "Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(request, timeout=30))["choices"][0]["message"]["content"])
"""


@pytest.mark.parametrize("key", [None, VLLM_KEY])
def test_a_command_agent_on_an_endpoint_gets_only_its_own_key(tmp_path, monkeypatch, key):
    monkeypatch.setenv("OPENAI_API_KEY", USER_KEY)
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\n# S\n")
    with ScriptedOpenAIServer([{"content": "done"}]) as server:
        config = CompileConfig(runner="command", agent_model="openai/agent", agent_command=f"{sys.executable} {tmp_path / 'agent.py'}")
        settings = ModelSettings(model="openai/agent", api_base=server.api_base, api_key=key)
        runner = make_runner(config, agent_settings=settings, sandbox_parent=tmp_path)
        [trace] = runner.run_batch(package_dir=tmp_path / "skill", skill_sha256="x", task=RolloutTask(prompt="p", skill_name="s"),
                                   batch="input", n=1, archive_dir=tmp_path / "raw")
    assert trace.error_category is None, trace.error_reason
    assert bearers(server) == {f"Bearer {key or PLACEHOLDER_KEY}"}
