"""The chat runner through the scripted litellm provider (and, slow, the embedded local model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.errors import InputError, PromptTooLong
from deep_pipeline.llm.budget import Budget, BudgetExhausted
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.rollouts import RolloutTask, make_runner
from tests.scripted_llm import litellm

SKILL = "---\nname: haiku\ndescription: Writes haiku.\n---\n# Haiku\n\nCount 5-7-5 syllables.\n"
PROMPT = "Write a haiku about rain."


@pytest.fixture
def package(tmp_path: Path) -> Path:
    package = tmp_path / "skill"
    (package / "references").mkdir(parents=True)
    (package / "SKILL.md").write_text(SKILL)
    (package / "references" / "meter.md").write_text("5-7-5\n")
    return package


def run(tmp_path: Path, package: Path, client_factory, n: int = 3, parallel: int = 3, task_dir=None):
    runner = make_runner(CompileConfig(runner="chat", agent_model="scripted/agent", parallel=parallel),
                         model_client=client_factory)
    task = RolloutTask(prompt=PROMPT, task_dir=task_dir, skill_name="haiku")
    return runner.run_batch(package_dir=package, skill_sha256="sha-1", task=task, batch="section-i02",
                            n=n, archive_dir=tmp_path / "raw")


def client(tmp_path: Path, **kwargs):
    return lambda: ModelClient(ModelSettings(model="scripted/agent"), "agent", cache_dir=tmp_path / "cache",
                               backoff_s=0, **kwargs)


def test_three_rollouts_are_three_samples_with_skill_in_the_system_prompt(tmp_path, package, scripted_llm):
    scripted_llm.script("agent", "rain on the roof", "grey sky, soft water", "puddles remember")
    traces = run(tmp_path, package, client(tmp_path))
    assert len(scripted_llm.requests_for("agent")) == 3  # not one cached answer served three times
    assert sorted(t.final_output for t in traces) == sorted(["rain on the roof", "grey sky, soft water",
                                                             "puddles remember"])
    for index, trace in enumerate(traces):
        assert (trace.trace_id, trace.batch, trace.skill_sha256) == (f"section-i02-r{index}", "section-i02", "sha-1")
        assert (trace.agent, trace.model, trace.error_category) == ("chat", "scripted/agent", None)
        assert [s.source for s in trace.steps] == ["system", "user", "agent"]
        assert "Count 5-7-5 syllables." in trace.steps[0].text
        # A reference file is a unit (SPEC §4): the agent cannot open it, so it gets its text.
        assert '<skill name="haiku" file="references/meter.md">\n5-7-5\n\n</skill>' in trace.steps[0].text
        assert trace.steps[1].text == PROMPT and trace.steps[2].text == trace.final_output
        assert trace.prompt_tokens and trace.completion_tokens
        assert (tmp_path / "raw" / str(index) / "response.txt").read_text() == trace.final_output


def test_the_prompt_shows_the_unit_files_in_full_and_names_the_rest(tmp_path, package):
    from deep_pipeline.rollouts.chat import chat_messages

    task = RolloutTask(prompt=PROMPT, skill_name="haiku")
    (package / "scripts").mkdir()
    (package / "scripts" / "count.py").write_text("print(5)\n")
    (package / "notes.md").write_text("a note SKILL.md never names\n")
    system = chat_messages(package, task)[0]["content"]
    assert "5-7-5\n\n</skill>" in system and "print(5)" not in system and "a note" not in system
    assert "Other files in the skill package:\n- notes.md\n- scripts/count.py\n" in system
    # An edit to the reference file reaches the agent.
    (package / "references" / "meter.md").write_text("5-7-5, and a kigo\n")
    assert "5-7-5, and a kigo" in chat_messages(package, task)[0]["content"]
    # SKILL.md alone: the prompt it always had, with no file section at all.
    single = tmp_path / "single"
    single.mkdir()
    (single / "SKILL.md").write_text(SKILL)
    assert chat_messages(single, task)[0]["content"] == (
        "You are an agent working on a task. The skill `haiku` is installed for you; follow it where it applies."
        f'\n\n<skill name="haiku" file="SKILL.md">\n{SKILL}\n</skill>\n\n'
        "Answer the task directly: you cannot run commands or open files.")


def test_rerun_of_a_batch_is_served_from_the_cache(tmp_path, package, scripted_llm):
    scripted_llm.script("agent", "one", "two", "three")
    first = run(tmp_path, package, client(tmp_path))
    again = run(tmp_path, package, client(tmp_path))  # a resumed compile repeats no model call
    assert len(scripted_llm.requests_for("agent")) == 3
    assert [t.final_output for t in again] == [t.final_output for t in first]


def test_model_failure_is_an_api_error_trace_and_the_batch_goes_on(tmp_path, package, scripted_llm):
    failure = litellm.BadRequestError(message="model refused", model="agent", llm_provider="scripted")
    scripted_llm.script("agent", failure, "fine answer")
    first, second = run(tmp_path, package, client(tmp_path), n=2, parallel=1)
    assert first.error_category == "api_error" and "model refused" in first.error_reason
    assert [s.source for s in first.steps] == ["system", "user"]
    assert second.error_category is None and second.final_output == "fine answer"


def test_budget_exhaustion_ends_the_batch_instead_of_a_failed_trace(tmp_path, package, scripted_llm):
    scripted_llm.always("agent", "answer")
    budget = Budget(max_calls=1)
    with pytest.raises(BudgetExhausted):
        run(tmp_path, package, client(tmp_path, budget=budget), n=2, parallel=1)


def test_missing_task_directory_is_refused_before_any_call(tmp_path, package, scripted_llm):
    with pytest.raises(InputError, match="task directory does not exist"):
        run(tmp_path, package, client(tmp_path), task_dir=tmp_path / "gone")
    assert scripted_llm.requests_for("agent") == []


def test_chat_runner_needs_a_model_client():
    with pytest.raises(InputError, match="model_client"):
        make_runner(CompileConfig(runner="chat"))


@pytest.mark.slow
def test_chat_rollout_on_the_embedded_local_model(tmp_path, package):
    from deep_pipeline.llm.local_model import stop_local_server

    home = tmp_path / "home"
    local = lambda: ModelClient(ModelSettings(model="local", max_tokens=48), "agent", local_home=home)  # noqa: E731
    try:
        [trace] = run(tmp_path, package, local, n=1)
    finally:
        stop_local_server(home)
    assert trace.error_category is None, trace.error_reason
    assert trace.final_output.strip() and trace.steps[2].text == trace.final_output
    assert trace.completion_tokens and trace.completion_tokens <= 48


def test_a_prompt_over_the_context_window_stops_the_batch_naming_the_files_by_size(tmp_path, package, scripted_llm):
    (package / "references" / "meter.md").write_text("A long table of meters.\n" * 400)
    overflow = litellm.ContextWindowExceededError(
        message="the request exceeds the available context size, try increasing it", model="agent",
        llm_provider="scripted")
    scripted_llm.always("agent", overflow)
    with pytest.raises(PromptTooLong) as raised:
        run(tmp_path, package, client(tmp_path), n=1)
    line = str(raised.value)
    assert "references/meter.md 9,600 chars, SKILL.md" in line  # the largest file first
    assert "longer than the context window of scripted/agent" in line and "mini-swe-agent" in line
    assert len(scripted_llm.requests_for("agent")) == 1  # never resent: the same prompt is as long again
    assert raised.value.__cause__ is None  # the CLI prints the innermost cause: this line, not the model's
