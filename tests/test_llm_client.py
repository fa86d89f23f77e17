"""ModelClient through litellm with the scripted provider: retries, cache, budget, accounting."""

from __future__ import annotations

import json
import threading
import time

import pytest
from pydantic import BaseModel, ConfigDict, Field

from deep_pipeline.errors import StepError
from deep_pipeline.llm.accounting import read_calls, usage_by_role
from deep_pipeline.llm.budget import Budget, BudgetExhausted
from deep_pipeline.llm.client import ModelClient, ModelSettings
from tests.scripted_llm import rate_limit, register_prices, server_error, timeout

MESSAGES = [{"role": "user", "content": "Score the unit."}]


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(max_length=40)
    score: int = Field(ge=1, le=5)


def client(tmp_path, model="scripted/judge", **kwargs) -> ModelClient:
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    kwargs.setdefault("calls_log", tmp_path / "calls.jsonl")
    return ModelClient(ModelSettings(model=model), "judge", backoff_s=0.0, **kwargs)


def test_valid_answer_is_parsed_and_response_format_reaches_the_provider(tmp_path, scripted_llm):
    scripted_llm.script("judge", {"reason": "clear", "score": 4})
    answer, calls = client(tmp_path).structured("m00/col", MESSAGES, Verdict)
    assert answer == Verdict(reason="clear", score=4)
    [request] = scripted_llm.requests_for("judge")
    assert request.response_format["type"] == "json_schema"
    assert request.response_format["json_schema"]["strict"] is False  # strict only for the local grammar
    assert request.schema["properties"]["score"] == {"maximum": 5, "minimum": 1, "title": "Score", "type": "integer"}
    assert request.params["temperature"] == 0.0 and request.params["max_tokens"] == 1024
    assert [(c.attempt, c.cache_hit, c.error) for c in calls] == [(1, False, None)]
    assert calls[0].prompt_tokens and calls[0].completion_tokens


def test_invalid_answer_is_retried_with_the_problem_fed_back(tmp_path, scripted_llm):
    scripted_llm.script("judge", "not json at all", {"reason": "ok", "score": 9}, {"reason": "ok", "score": 5})
    answer, calls = client(tmp_path).structured("m00/col", MESSAGES, Verdict)
    assert answer.score == 5
    assert [c.attempt for c in calls] == [1, 2, 3]
    second, third = scripted_llm.requests_for("judge")[1:]
    assert "Invalid JSON" in second.last_user
    assert second.messages[-2] == {"role": "assistant", "content": "not json at all"}
    assert "score: Input should be less than or equal to 5" in third.last_user


def test_a_cut_off_answer_says_so_in_the_feedback(tmp_path, scripted_llm):
    scripted_llm.script("judge", '{"reason": "a very long reas', {"reason": "ok", "score": 3})
    short = ModelClient(ModelSettings(model="scripted/judge", max_tokens=5), "judge")
    short.structured("k", MESSAGES, Verdict)
    assert "cut off at max_tokens=5" in scripted_llm.requests_for("judge")[1].last_user


def test_always_invalid_fails_naming_the_call(tmp_path, scripted_llm):
    scripted_llm.always("judge", {"reason": "ok", "score": 0})
    with pytest.raises(StepError) as failure:
        client(tmp_path).structured("c1/section/m00/correctness", MESSAGES, Verdict, max_attempts=2)
    message = str(failure.value)
    assert "judge call 'c1/section/m00/correctness'" in message
    assert "scripted/judge" in message and "2 attempts" in message and "score" in message
    assert len(scripted_llm.requests_for("judge")) == 2


def test_check_failure_is_fed_back(tmp_path, scripted_llm):
    scripted_llm.script("judge", {"reason": "", "score": 3}, {"reason": "because", "score": 3})
    check = lambda v: "reason must not be empty" if not v.reason else None  # noqa: E731
    answer, _ = client(tmp_path).structured("k", MESSAGES, Verdict, check=check)
    assert answer.reason == "because"
    assert "reason must not be empty" in scripted_llm.requests_for("judge")[1].last_user


def test_rate_limit_then_ok_is_resent_unchanged_and_each_send_is_logged(tmp_path, scripted_llm):
    scripted_llm.script("judge", rate_limit(), server_error(), {"reason": "ok", "score": 3})
    answer, calls = client(tmp_path).structured("k", MESSAGES, Verdict)
    assert answer.score == 3 and len(calls) == 1  # one attempt, sent three times
    requests = scripted_llm.requests_for("judge")
    assert len(requests) == 3 and requests[0].messages == requests[2].messages
    logged = read_calls(tmp_path / "calls.jsonl")
    assert [r.error is not None for r in logged] == [True, True, False]
    assert logged[0].error.startswith("RateLimitError")


def test_backoff_grows_exponentially(tmp_path, scripted_llm):
    scripted_llm.script("judge", rate_limit(), rate_limit(), {"reason": "ok", "score": 3})
    slow = ModelClient(ModelSettings(model="scripted/judge"), "judge", backoff_s=0.05)
    started = time.monotonic()
    slow.structured("k", MESSAGES, Verdict)
    # Two waits of 0.05*[0.5,1] and 0.1*[0.5,1]: at least 0.075 s in all.
    assert time.monotonic() - started >= 0.075


def test_timeout_is_retried_then_fails_cleanly(tmp_path, scripted_llm):
    scripted_llm.script("judge", timeout(), {"reason": "ok", "score": 2})
    answer, _ = client(tmp_path).structured("k1", MESSAGES, Verdict)
    assert answer.score == 2
    scripted_llm.always("judge", timeout())
    with pytest.raises(StepError, match=r"judge call 'k2' .* failed 3 times: Timeout"):
        client(tmp_path, retries=2).structured("k2", MESSAGES, Verdict)


def test_a_non_transient_error_is_not_retried(tmp_path, scripted_llm):
    # Unscripted calls raise BadRequestError: a wrong request is not resent.
    with pytest.raises(StepError, match="no scripted answer"):
        client(tmp_path).structured("k", MESSAGES, Verdict)
    assert len(scripted_llm.requests_for("judge")) == 1


def test_rerun_is_answered_from_the_cache_with_zero_new_calls(tmp_path, scripted_llm):
    scripted_llm.script("judge", "{bad", {"reason": "ok", "score": 4})
    first, first_calls = client(tmp_path).structured("k", MESSAGES, Verdict)
    budget = Budget(max_calls=10)
    again, again_calls = client(tmp_path, budget=budget).structured("k", MESSAGES, Verdict)
    assert again == first
    assert [c.cache_hit for c in again_calls] == [True, True]
    assert [c.prompt_tokens for c in again_calls] == [c.prompt_tokens for c in first_calls]
    assert len(scripted_llm.requests) == 2 and budget.calls_used == 0
    assert len(read_calls(tmp_path / "calls.jsonl")) == 2  # cache hits are not new calls


def test_cache_key_names_the_step(tmp_path, scripted_llm):
    scripted_llm.always("judge", {"reason": "ok", "score": 4})
    client(tmp_path).structured("m00/correctness", MESSAGES, Verdict)
    client(tmp_path).structured("m01/correctness", MESSAGES, Verdict)  # a refresh: same request, new step
    assert len(scripted_llm.requests) == 2


def test_replay_answers_only_from_the_cache(tmp_path, scripted_llm):
    scripted_llm.script("judge", {"reason": "ok", "score": 4})
    client(tmp_path).structured("k", MESSAGES, Verdict)
    replay = client(tmp_path, replay=True)
    assert replay.structured("k", MESSAGES, Verdict)[0].score == 4
    with pytest.raises(StepError, match="'other'.*replay mode and no cached answer"):
        replay.structured("other", MESSAGES, Verdict)
    assert len(scripted_llm.requests) == 1


def test_call_budget_stops_before_sending(tmp_path, scripted_llm):
    scripted_llm.always("judge", {"reason": "ok", "score": 4})
    budget = Budget(max_calls=2)
    judge = client(tmp_path, budget=budget)
    judge.structured("a", MESSAGES, Verdict)
    judge.structured("b", MESSAGES, Verdict)
    with pytest.raises(BudgetExhausted, match="2 of 2 calls"):
        judge.structured("c", MESSAGES, Verdict)
    assert len(scripted_llm.requests) == 2 and budget.calls_used == 2  # the refused call is not counted


def test_usd_budget_counts_costs_and_refuses_a_call_that_would_exceed_it(tmp_path, scripted_llm):
    register_prices("priced", 1e-3, 1e-3)
    scripted_llm.always("priced", {"reason": "ok", "score": 4})
    budget = Budget(max_usd=1.0)
    priced = ModelClient(ModelSettings(model="scripted/priced", max_tokens=100), "judge", budget=budget, calls_log=tmp_path / "c.jsonl")
    _, [call] = priced.structured("a", MESSAGES, Verdict)
    assert call.cost_usd == pytest.approx((call.prompt_tokens + call.completion_tokens) * 1e-3)
    assert budget.usd_used == pytest.approx(call.cost_usd)
    # The worst case of the next call (prompt + 100 answer tokens at $0.001) exceeds what is left.
    tight = Budget(max_usd=0.05, usd_used=0.0)
    priced.budget = tight
    with pytest.raises(BudgetExhausted, match="USD budget"):
        priced.structured("b", MESSAGES, Verdict)
    assert len(scripted_llm.requests_for("priced")) == 1


def test_unknown_cost_is_none_and_totals_say_so(tmp_path, scripted_llm):
    scripted_llm.always("judge", {"reason": "ok", "score": 4})
    _, [call] = client(tmp_path).structured("a", MESSAGES, Verdict)
    assert call.cost_usd is None
    totals = usage_by_role(read_calls(tmp_path / "calls.jsonl"))
    assert totals["judge"].calls == 1 and totals["judge"].cost_usd is None
    assert totals["judge"].prompt_tokens == call.prompt_tokens


def test_budget_resumes_from_the_calls_log(tmp_path, scripted_llm):
    scripted_llm.always("judge", {"reason": "ok", "score": 4})
    judge = client(tmp_path)
    judge.structured("a", MESSAGES, Verdict)
    judge.structured("b", MESSAGES, Verdict)
    with open(tmp_path / "calls.jsonl", "a") as log:
        log.write('{"step_key": "cut sh')  # a crash mid-line
    resumed = Budget.from_calls_log(tmp_path / "calls.jsonl", max_calls=3, max_usd=None)
    assert resumed.calls_used == 2


def test_keys_never_reach_records_or_the_log(tmp_path, scripted_llm, monkeypatch):
    monkeypatch.setenv("SCRIPTED_API_KEY", "sk-very-secret-123456")
    scripted_llm.always("judge", server_error("upstream said key sk-very-secret-123456 is bad"))
    with pytest.raises(StepError) as failure:
        client(tmp_path, retries=0).structured("k", MESSAGES, Verdict)
    assert "sk-very-secret" not in str(failure.value)
    assert "sk-very-secret" not in (tmp_path / "calls.jsonl").read_text()


def test_limiter_caps_calls_in_flight(tmp_path, scripted_llm):
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slow_answer(request):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return {"reason": "ok", "score": 3}

    scripted_llm.always("judge", slow_answer)
    limiter = threading.BoundedSemaphore(2)
    judge = ModelClient(ModelSettings(model="scripted/judge"), "judge", limiter=limiter)
    threads = [threading.Thread(target=judge.structured, args=(f"k{i}", MESSAGES, Verdict)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(scripted_llm.requests) == 6 and peak[0] == 2


def test_complete_returns_free_text_and_logs_the_agent_role(tmp_path, scripted_llm):
    scripted_llm.script("agent", "Here is the report.")
    agent = ModelClient(ModelSettings(model="scripted/agent"), "agent", calls_log=tmp_path / "calls.jsonl")
    text, record = agent.complete("c1/rollout/0", [{"role": "user", "content": "Write it."}])
    assert text == "Here is the report." and record.role == "agent"
    assert scripted_llm.requests_for("agent")[0].response_format is None
    line = json.loads((tmp_path / "calls.jsonl").read_text().strip())
    assert line["role"] == "agent" and line["step_key"] == "c1/rollout/0" and "content" not in line
