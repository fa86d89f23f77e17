"""mini-swe-agent 2.x trajectories, written by mini-swe-agent itself, import correctly.

The agent process is an edge we do not own, so these tests let the installed
mini-swe-agent (2.4.6) write real trajectory files: its DefaultAgent and
LocalEnvironment, driven by its own deterministic test models instead of an LLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("minisweagent")

from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.test_models import (  # noqa: E402
    DeterministicModel,
    DeterministicResponseAPIToolcallModel,
    DeterministicToolcallModel,
    make_output,
    make_response_api_output,
    make_toolcall_output,
)

from deep_pipeline.errors import InputError  # noqa: E402
from deep_pipeline.traces import import_sources, steps_from_miniswe  # noqa: E402

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo report.pdf written"


def run_agent(tmp_path: Path, model, name: str = "run.traj.json", **limits) -> Path:
    path = tmp_path / name
    agent = DefaultAgent(model, LocalEnvironment(cwd=str(tmp_path)), system_template="You run bash.",
                         instance_template="Task: {{task}}", output_path=path, **limits)
    try:
        agent.run("make the report")
    except Exception:  # an agent that crashes still saves its trajectory
        pass
    return path


def tool_call(command: str, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def toolcall_model(*commands: str) -> DeterministicToolcallModel:
    outputs = [
        make_toolcall_output(f"Step {i}.", [tool_call(cmd, f"call_{i}")], [{"command": cmd, "tool_call_id": f"call_{i}"}])
        for i, cmd in enumerate(commands, start=1)
    ]
    return DeterministicToolcallModel(outputs=outputs)


def test_tool_call_mode(tmp_path):
    path = run_agent(tmp_path, toolcall_model("echo hello", SUBMIT))
    assert json.loads(path.read_text())["trajectory_format"] == "mini-swe-agent-1.1"
    (item,) = import_sources([path])
    trace = item.trace
    assert item.format == "mini-swe-agent" and trace.trace_id == "run"
    assert [s.source for s in trace.steps] == ["system", "user", "agent", "tool", "agent"]
    assert trace.prompt == "Task: make the report"
    assert [(c.name, c.arguments, c.call_id) for c in trace.steps[2].tool_calls] == [
        ("bash", '{"command": "echo hello"}', "call_1")
    ]
    assert "hello" in trace.steps[3].text and "<returncode>0</returncode>" in trace.steps[3].text
    assert trace.final_output == "report.pdf written\n"
    assert trace.cost_usd == 2.0 and trace.error_category is None and not trace.timed_out


def test_text_mode_observations_are_tool_steps(tmp_path):
    outputs = [
        make_output("Look.\n\n```mswea_bash_command\necho hello\n```", [{"command": "echo hello"}]),
        make_output(f"Done.\n\n```mswea_bash_command\n{SUBMIT}\n```", [{"command": SUBMIT}]),
    ]
    path = run_agent(tmp_path, DeterministicModel(outputs=outputs))
    trace = import_sources([path])[0].trace
    assert [s.source for s in trace.steps] == ["system", "user", "agent", "tool", "agent"]
    assert [c.arguments for c in trace.steps[2].tool_calls] == ["echo hello"]
    assert trace.final_output == "report.pdf written\n"


def test_responses_api_mode(tmp_path):
    outputs = [
        make_response_api_output("Look.", [{"command": "echo hello", "tool_call_id": "fc_1"}]),
        make_response_api_output(None, [{"command": SUBMIT, "tool_call_id": "fc_2"}]),
    ]
    path = run_agent(tmp_path, DeterministicResponseAPIToolcallModel(outputs=outputs))
    trace = import_sources([path])[0].trace
    assert [s.source for s in trace.steps] == ["system", "user", "agent", "tool", "agent"]
    assert trace.steps[1].text == "Task: make the report"
    assert trace.steps[2].text == "Look." and trace.steps[2].tool_calls[0].call_id == "fc_1"
    assert "hello" in trace.steps[3].text


def test_wall_time_limit_is_a_timeout(tmp_path):
    # The first answer sleeps past the 1 s limit; the next query hits TimeExceeded.
    model = toolcall_model("echo hello", "echo never")
    model.config.outputs.insert(0, make_toolcall_output(None, [], [{"command": "/sleep 1.05"}]))
    path = run_agent(tmp_path, model, wall_time_limit_seconds=1)
    trace = import_sources([path])[0].trace
    assert trace.timed_out and trace.error_category == "timeout" and trace.error_reason == "TimeExceeded"
    assert trace.steps[-1].source == "system" and trace.steps[-1].text.startswith("exit: TimeExceeded")


def test_step_limit_is_an_agent_error(tmp_path):
    path = run_agent(tmp_path, toolcall_model("echo one", "echo two"), step_limit=1)
    trace = import_sources([path])[0].trace
    assert trace.error_category == "agent_error" and not trace.timed_out
    assert trace.error_reason == "LimitsExceeded"


def test_steps_from_miniswe_refuses_data_without_messages():
    with pytest.raises(InputError, match="run.json: messages: expected a list"):
        steps_from_miniswe({"info": {}}, origin="run.json")
    with pytest.raises(InputError, match=r"run.json: messages\[1\]: expected an object"):
        steps_from_miniswe({"messages": [{"role": "user", "content": "x"}, "oops"]}, origin="run.json")


SWEBENCH_TEMPLATE = (
    "<pr_description>\nConsider the following PR description:\n{{task}}\n</pr_description>\n\n"
    "<instructions>\n# Task Instructions\nWork in the repository; submit with the magic echo.\n</instructions>"
)


def test_swebench_shaped_run_keeps_call_ids_failures_model_task_and_prompt(tmp_path):
    """What `mini` writes for a SWE-bench instance (run/benchmarks/swebench.py saves `instance_id`)."""
    path = tmp_path / "acme__reports-7.traj.json"
    agent = DefaultAgent(toolcall_model("exit 3", "echo fixed", SUBMIT), LocalEnvironment(cwd=str(tmp_path)),
                         system_template="You run bash.", instance_template=SWEBENCH_TEMPLATE, output_path=path)
    agent.run("Make the report name every column.")
    agent.save(path, {"instance_id": "acme__reports-7"})
    data = json.loads(path.read_text())
    codes = [m["extra"]["returncode"] for m in data["messages"] if m["role"] == "tool"]
    assert codes == [3, 0]
    (item,) = import_sources([path])
    trace = item.trace
    assert item.task_name == "acme__reports-7"
    assert trace.model == "deterministic_toolcall"  # info.config.model.model_name
    assert trace.prompt == "Make the report name every column."
    assert "<instructions>" in trace.steps[1].text
    tools = [(s.tool_call_id, s.tool_name, s.is_error) for s in trace.steps if s.source == "tool"]
    assert tools == [("call_1", "bash", True), ("call_2", "bash", False)]
    assert trace.final_output == "report.pdf written\n" and trace.error_category is None
