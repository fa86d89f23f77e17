"""What real traces hold survives the import (SPEC §2, §3).

The fixtures are synthetic, in the shapes real files showed: Harbor's ATIF golden files
(results naming their call by `source_call_id`, copied context, terminus-2's subagent
handoff, OpenHands' per-step model), SWE-bench mini-swe-agent 1.x trajectories (the
scaffold around the task, a failing command, the submission), and BenchFlow's
review-skill fixtures (a near-miss of its capture schema). mini-swe-agent 2.x files are
written by mini-swe-agent itself, in test_traces_miniswe.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deep_pipeline.core.models import Trace, TraceStep
from deep_pipeline.errors import InputError
from deep_pipeline.llm.render import render_trace
from deep_pipeline.traces import import_sources
from tests.cli_cases import one_line_error

TRACES = Path(__file__).parent / "fixtures" / "traces"


def one(path: Path):
    (item,) = import_sources([path])
    return item


def answers(trace) -> list[tuple[int, str | None, str | None, bool]]:
    """Each tool step: its number, the call it answers, that call's tool, whether it failed."""
    return [(s.step, s.tool_call_id, s.tool_name, s.is_error) for s in trace.steps if s.source == "tool"]


# ---------------------------------------------------------------- ATIF


def test_atif_results_name_the_call_and_tool_they_answer():
    trace = one(TRACES / "atif" / "continued-handoff.trajectory.json").trace
    # Listed fonts first, though called second: pairing by position would pair them wrong.
    assert answers(trace) == [(2, None, None, False), (6, "call_fonts", "str_replace_editor", False),
                              (7, "call_data", "bash", False)]
    assert trace.steps[5].text == "DejaVuSans.ttf" and trace.steps[6].text == "a,b\n1,2"
    older = one(TRACES / "atif" / "csv-report.trajectory.json").trace
    assert [(a[1], a[2]) for a in answers(older)] == [("call_a", "bash"), ("call_b", "bash")]


def test_atif_only_result_of_a_step_answers_its_only_call(tmp_path):
    """terminus-2 and ATIF 1.5 writers leave `source_call_id` out; one call, one result is no guess."""
    steps = [
        {"step_id": 1, "source": "user", "message": "Say hi."},
        {"step_id": 2, "source": "agent", "message": "", "model_name": "openai/gpt-4o",
         "tool_calls": [{"tool_call_id": "call_0_1", "function_name": "bash_command",
                         "arguments": {"keystrokes": "echo hi\n"}}],
         "observation": {"results": [{"content": "hi"}]}},
        {"step_id": 3, "source": "agent", "message": "Two at once.",
         "tool_calls": [{"tool_call_id": "a", "function_name": "bash", "arguments": {}},
                        {"tool_call_id": "b", "function_name": "bash", "arguments": {}}],
         "observation": {"results": [{"content": "one"}, {"content": "two"}]}},
    ]
    path = tmp_path / "t2.trajectory.json"
    path.write_text(json.dumps({"schema_version": "ATIF-v1.5", "session_id": "t2", "agent": {"name": "terminus-2"},
                                "steps": steps}))
    trace = one(path).trace
    # Two unnamed results of two calls stay unpaired: their order is no proof.
    assert answers(trace) == [(3, "call_0_1", "bash_command", False), (5, None, None, False), (6, None, None, False)]
    assert trace.model == "openai/gpt-4o"


def test_atif_copied_context_is_not_shown_twice():
    trace = one(TRACES / "atif" / "continued-handoff.trajectory.json").trace
    assert [s.source for s in trace.steps] == ["system", "tool", "user", "agent", "agent", "tool", "tool", "agent"]
    assert not any("already seen" in s.text for s in trace.steps)
    assert trace.prompt == "Continue: make the PDF report from data.csv"


def test_atif_subagent_reference_keeps_its_path_and_summary():
    handoff = one(TRACES / "atif" / "continued-handoff.trajectory.json").trace.steps[1]
    assert handoff.text == ("[subagent trajectory trajectory.summarization-1-summary.json] "
                            "The CSV has 2 columns; fonts are missing.")


def test_atif_model_from_the_steps_when_the_agent_names_none():
    trace = one(TRACES / "atif" / "continued-handoff.trajectory.json").trace
    assert (trace.agent, trace.model) == ("openhands", "openai/gpt-5-mini")  # not the copied step's old model


def test_atif_reasoning_is_shown_to_the_judge_as_reasoning():
    trace = one(TRACES / "atif" / "continued-handoff.trajectory.json").trace
    reasoning, message = trace.steps[3], trace.steps[4]
    assert reasoning.reasoning and not message.reasoning
    shown = render_trace(trace)
    assert "[atif-continued-3 step 4] agent (reasoning): Two reads at once" in shown
    assert "[atif-continued-3 step 5] agent: Checking the data and the fonts." in shown
    assert "[atif-continued-3 step 6] tool (result of str_replace_editor call call_fonts): DejaVuSans.ttf" in shown


def test_a_step_without_reasoning_renders_as_before():
    plain = Trace(trace_id="t1", steps=[TraceStep(step=1, source="agent", text="Hi.")])
    assert render_trace(plain).splitlines()[1] == "[t1 step 1] agent: Hi."
    assert "reasoning" not in plain.steps[0].model_dump_json(exclude_defaults=True)


# ---------------------------------------------------------------- mini-swe-agent 1.x


def test_miniswe_1x_swebench_run_keeps_model_task_prompt_and_failures():
    item = one(TRACES / "miniswe" / "acme__reports-1042.traj.json")
    trace = item.trace
    assert (item.task_name, trace.trace_id) == ("acme__reports-1042", "acme__reports-1042")
    assert trace.model == "anthropic/claude-sonnet-4-20250514"
    # The task from <pr_description>, not the 1 k characters of scaffold around it.
    assert trace.prompt == "Make a PDF report from data.csv; the report must name every column."
    assert "<instructions>" in trace.steps[1].text  # what the agent saw stays its user step
    assert [s.source for s in trace.steps] == ["system", "user", "agent", "tool", "agent", "tool", "agent"]
    assert answers(trace) == [(4, None, None, True), (6, None, None, False)]  # <returncode>1</returncode>


def test_miniswe_1x_submission_is_the_final_output_not_a_user_turn():
    trace = one(TRACES / "miniswe" / "acme__reports-1042.traj.json").trace
    assert trace.final_output.startswith("diff --git a/report.py b/report.py")
    assert not any("diff --git" in s.text for s in trace.steps)  # shown once, as the final output
    assert trace.error_category is None


def test_miniswe_1x_exit_other_than_submitted_is_a_system_step(tmp_path):
    data = json.loads((TRACES / "miniswe" / "acme__reports-1042.traj.json").read_text())
    data["info"].update(exit_status="LimitsExceeded", submission="")
    data["messages"][-1]["content"] = "cost limit reached"
    path = tmp_path / "limited.traj.json"
    path.write_text(json.dumps(data))
    trace = one(path).trace
    assert trace.steps[-1].source == "system" and trace.steps[-1].text == "exit: LimitsExceeded\ncost limit reached"
    assert trace.error_category == "agent_error"


# ---------------------------------------------------------------- BenchFlow


def test_benchflow_results_name_their_call_and_thoughts_are_reasoning():
    trace = one(TRACES / "benchflow" / "csv-report__a1b2c3d4").trace
    assert answers(trace) == [(4, "t1", "execute", False), (6, "t2", "execute", False)]
    assert [s.step for s in trace.steps if s.reasoning] == [2]


def test_benchflow_failed_call_is_an_error(tmp_path):
    path = tmp_path / "run.jsonl"
    events = [
        {"type": "agent_message", "text": "Running it."},
        {"type": "tool_call", "tool_call_id": "c1", "kind": "execute", "title": "make", "status": "failed",
         "content": [{"type": "content", "content": {"type": "text", "text": "make: *** No rule"}}]},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert answers(one(path).trace) == [(2, "c1", "execute", True)]


def test_benchflow_near_miss_schema_is_refused_naming_file_and_line():
    folder = TRACES / "benchflow-near-miss" / "review__n3arm1ss"
    with pytest.raises(InputError) as refused:
        import_sources([folder])
    message = str(refused.value)
    assert message.startswith(f"{folder / 'trajectory' / 'acp_trajectory.jsonl'}:1: ")
    assert "'tool_call'" in message and "\n" not in message


def test_benchflow_near_miss_jsonl_refused_by_the_cli(tmp_path, capsys):
    source = tmp_path / "near-miss.jsonl"
    shutil.copy(TRACES / "benchflow-near-miss" / "review__n3arm1ss" / "trajectory" / "acp_trajectory.jsonl", source)
    argv = ["import-traces", str(source), "-o", str(tmp_path / "out.json")]
    err = one_line_error(capsys, argv, source, tmp_path)
    assert f"{source}:1:" in err
    assert not (tmp_path / "out.json").exists()


def test_benchflow_stream_with_known_lines_keeps_them_and_skips_a_near_miss_call(tmp_path):
    path = tmp_path / "run.jsonl"
    events = [{"type": "user_message", "text": "Review the notes."},
              {"type": "tool_call", "tool": "read", "args": {"path": "notes.txt"}},
              {"type": "agent_message", "text": "Looks fine."},
              # BenchFlow's gemini-cli fallback: no id, but what ran.
              {"type": "tool_call", "tool_call_id": "", "kind": "run_shell_command", "title": "ls",
               "status": "completed", "content": "notes.txt"}]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    trace = one(path).trace
    assert [(s.source, s.text, [c.name for c in s.tool_calls]) for s in trace.steps] == [
        ("user", "Review the notes.", []), ("agent", "Looks fine.", ["run_shell_command"]), ("tool", "notes.txt", [])]
    assert answers(trace) == [(3, None, None, False)]


# Every category BenchFlow's result.json carries today (benchflow/_utils/scoring.py, diagnostics.py).
BENCHFLOW_CATEGORIES = {
    "timeout": "timeout",
    "idle_timeout": "idle_timeout",
    "install_failure": "sandbox_setup",
    "infra_failure": "sandbox_setup",
    "sandbox_setup": "sandbox_setup",
    "provider_auth": "api_error",
    "provider_rate_limit": "api_error",
    "api_error": "api_error",
    "suspected_api_error": "api_error",
    "provider_rejected": "agent_error",
    "pipe_closed": "agent_error",
    "acp_error": "agent_error",
    "other": "agent_error",
}


@pytest.mark.parametrize("theirs,ours", list(BENCHFLOW_CATEGORIES.items()), ids=list(BENCHFLOW_CATEGORIES))
def test_benchflow_error_category(tmp_path, theirs, ours):
    folder = tmp_path / "csv-report__c4t3g0ry"
    shutil.copytree(TRACES / "benchflow" / "csv-report__a1b2c3d4", folder)
    result = json.loads((folder / "result.json").read_text())
    # A message that names none of the words guessed from, so the category alone decides.
    result.update(error="the rollout ended early", error_category=theirs)
    (folder / "result.json").write_text(json.dumps(result))
    trace = one(folder).trace
    assert trace.error_category == ours
    assert trace.timed_out == (ours in ("timeout", "idle_timeout"))
