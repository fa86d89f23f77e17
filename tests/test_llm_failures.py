"""The model layer's failures (SPEC §9): keyless endpoints, access errors,
bad answers and the cache, and what a call really cost."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.errors import AnswerError, PromptTooLong, StepError
from deep_pipeline.llm.accounting import read_calls, usage_by_role, usage_of_calls
from deep_pipeline.llm.cache import ResponseCache
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.rollouts import RolloutTask, make_runner
from tests.scripted_llm import auth_error, rate_limit, register_prices
from tests.scripted_openai_server import ScriptedOpenAIServer

MESSAGES = [{"role": "user", "content": "Score the unit."}]


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(max_length=40)
    score: int = Field(ge=1, le=5)


def client(tmp_path, model="scripted/judge", role="judge", **kwargs) -> ModelClient:
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    kwargs.setdefault("calls_log", tmp_path / "calls.jsonl")
    kwargs.setdefault("backoff_s", 0.0)
    api_base = kwargs.pop("api_base", None)
    return ModelClient(ModelSettings(model=model, api_base=api_base), role, **kwargs)


# -- keyless endpoints and access errors (item 3) ---------------------------------------


def test_an_endpoint_that_needs_no_key_answers_without_one(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedOpenAIServer([{"content": "hello from a local server"}]) as server:
        agent = client(tmp_path, model="openai/served", role="agent", api_base=server.api_base, retries=0)
        text, record = agent.complete("k", MESSAGES)
    assert text == "hello from a local server" and record.error is None
    [request] = server.requests
    assert request["authorization"].startswith("Bearer sk-")  # a placeholder, not the user's key


# A self-hosted endpoint gets no provider key: the fix named is the role's own key setting.
@pytest.mark.parametrize("status, variable", [(401, "editor_api_key_env"), (403, "editor_api_key_env"),
                                              (404, "editor_api_base")])
def test_an_access_error_stops_at_once_naming_role_model_and_variable(tmp_path, monkeypatch, status, variable):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-123456")
    with ScriptedOpenAIServer([{"status": status, "error": "refused"}]) as server:
        editor = client(tmp_path, model="openai/served", role="editor", api_base=server.api_base,
                        backoff_s=5.0)  # a retry would show as a 5 s wait and a second request
        with pytest.raises(StepError) as failure:
            editor.complete("k", MESSAGES)
    message = str(failure.value)
    assert len(server.requests) == 1 and type(failure.value).__name__ == "ModelAccessError"
    assert "\n" not in message and "editor" in message and "openai/served" in message and variable in message


def test_a_prompt_over_the_context_window_is_never_resent(tmp_path):
    """llama.cpp's answer (the embedded model's server) to a prompt longer than its context."""
    overflow = {"status": 400, "error": "the request exceeds the available context size, try increasing it"}
    with ScriptedOpenAIServer([overflow, {"content": "never asked for"}]) as server:
        judge = client(tmp_path, model="openai/served", api_base=server.api_base, backoff_s=5.0)
        with pytest.raises(PromptTooLong) as failure:
            judge.complete("k", MESSAGES)
    assert len(server.requests) == 1  # a resend would be as long: not one is made
    assert "judge call 'k' (model openai/served): the prompt is longer than the model's context window" in str(
        failure.value)


def test_the_chat_runner_lets_an_access_error_stop_the_batch(tmp_path, scripted_llm):
    scripted_llm.always("agent", auth_error())
    runner = make_runner(CompileConfig(runner="chat", agent_model="scripted/agent"),
                         model_client=lambda: client(tmp_path, model="scripted/agent", role="agent"))
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\n# S\n")
    with pytest.raises(StepError, match="agent.*scripted/agent.*SCRIPTED_API_KEY"):
        runner.run_batch(package_dir=tmp_path / "skill", skill_sha256="x", task=RolloutTask(prompt="p", skill_name="s"),
                         batch="input", n=2, archive_dir=tmp_path / "raw")
    assert len(scripted_llm.requests_for("agent")) <= 2  # one per rollout at most, never retried


# -- a bad answer is never served from the cache (item 11) ------------------------------


def test_a_bad_answer_is_never_served_from_the_cache(tmp_path, scripted_llm):
    scripted_llm.script("judge", "{bad", "{bad", "{worse", {"reason": "ok", "score": 4})
    with pytest.raises(AnswerError):
        client(tmp_path).structured("m00/clarity", MESSAGES, Verdict)
    answer, calls = client(tmp_path).structured("m00/clarity", MESSAGES, Verdict)  # the model was mended
    assert answer.score == 4 and not calls[0].cache_hit
    assert len(scripted_llm.requests_for("judge")) == 4
    assert len(read_calls(tmp_path / "calls.jsonl")) == 4  # the invalid attempts stay in the log


def test_a_valid_answer_after_bad_attempts_is_replayed_whole(tmp_path, scripted_llm):
    scripted_llm.script("judge", "{bad", {"reason": "ok", "score": 4})
    first, _ = client(tmp_path).structured("m00/clarity", MESSAGES, Verdict)
    again, calls = client(tmp_path).structured("m00/clarity", MESSAGES, Verdict)
    assert again == first and [c.cache_hit for c in calls] == [True, True]
    assert len(scripted_llm.requests_for("judge")) == 2


# -- honest cost (items 7 and 13) -------------------------------------------------------


def test_a_failed_call_has_an_unknown_cost(tmp_path, scripted_llm):
    register_prices("priced", 1e-3, 1e-3)
    scripted_llm.script("priced", rate_limit(), {"reason": "ok", "score": 4})
    client(tmp_path, model="scripted/priced").structured("k", MESSAGES, Verdict)
    failed, answered = read_calls(tmp_path / "calls.jsonl")
    assert failed.error and failed.cost_usd is None and answered.cost_usd
    assert usage_by_role([failed, answered])["judge"].cost_usd is None  # not answered's cost + $0


def test_a_step_answered_from_the_cache_reports_what_its_answers_cost(tmp_path, scripted_llm):
    register_prices("priced", 1e-3, 1e-3)
    scripted_llm.script("priced", "{bad", {"reason": "ok", "score": 4})
    _, sent = client(tmp_path, model="scripted/priced").structured("k", MESSAGES, Verdict)
    _, replayed = client(tmp_path, model="scripted/priced").structured("k", MESSAGES, Verdict)
    fresh, resumed = usage_of_calls(sent), usage_of_calls(replayed)
    assert fresh.cost_usd and resumed.cost_usd == pytest.approx(fresh.cost_usd)  # not a made-up $0
    assert (resumed.prompt_tokens, resumed.completion_tokens) == (fresh.prompt_tokens, fresh.completion_tokens)
    assert (fresh.cache_hits, resumed.cache_hits) == (0, 2)  # and it says they were not new calls
    assert len(read_calls(tmp_path / "calls.jsonl")) == 2


class Killed(BaseException):
    """Stands for SIGKILL at one point of a call: nothing after it runs."""


@pytest.mark.parametrize("kill_point", ["before the answer is stored", "before the call is logged"])
def test_every_kept_answer_is_counted_once_whatever_the_kill_point(tmp_path, scripted_llm, monkeypatch, kill_point):
    import deep_pipeline.llm.accounting as accounting

    scripted_llm.always("judge", {"reason": "ok", "score": 4})
    target, name = (ResponseCache, "put") if kill_point == "before the answer is stored" else (accounting, "append_call")
    real = getattr(target, name)

    def killed_once(*args, **kwargs):
        monkeypatch.setattr(target, name, real)
        raise Killed

    monkeypatch.setattr(target, name, killed_once)
    with pytest.raises(Killed):
        client(tmp_path).structured("k", MESSAGES, Verdict)
    client(tmp_path).structured("k", MESSAGES, Verdict)  # the resumed run
    client(tmp_path).structured("k", MESSAGES, Verdict)  # and one more: a replay adds nothing
    # One answer kept, one call counted: an answer lost with the process is not in the totals.
    assert usage_by_role(read_calls(tmp_path / "calls.jsonl"))["judge"].calls == 1
