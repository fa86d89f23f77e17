"""The `command` runner against fake agent CLIs (tests/agents/): traces, failures, hygiene."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.errors import InputError
from deep_pipeline.rollouts import RolloutTask, SandboxLimits, make_runner
from deep_pipeline.rollouts.command import CommandRunner, fill_template, split_template
from deep_pipeline.rollouts.process import TRUNCATION_MARKER
from tests.pids import alive_in, read_pids

AGENTS = Path(__file__).parent / "agents"
SKILL = "---\nname: demo\ndescription: A demo skill.\n---\n# Demo\n\nAlways write answer.txt.\n"
PROMPT = """Say "hi" & don't expand $HOME; rm -rf / ; `whoami`"""


def agent(script: str, *args: str) -> str:
    """A template that runs one fake agent with this interpreter."""
    return " ".join(shlex.quote(a) for a in (sys.executable, str(AGENTS / script), *args))


@pytest.fixture
def workspace(tmp_path: Path) -> dict:
    package = tmp_path / "skill"
    (package / "scripts").mkdir(parents=True)
    (package / "SKILL.md").write_text(SKILL)
    (package / "scripts" / "run.sh").write_text("echo run\n")
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    (task_dir / "input.txt").write_text("data\n")
    sandboxes = tmp_path / "sandboxes"
    sandboxes.mkdir()
    return {"package": package, "task": RolloutTask(prompt=PROMPT, task_dir=task_dir, skill_name="demo"),
            "archive": tmp_path / "raw", "sandboxes": sandboxes}


def runner(ws: dict, template: str, fmt: str = "text", model: str = "anthropic/claude-test", **limits) -> CommandRunner:
    return CommandRunner(template, fmt, model=model, limits=SandboxLimits(**limits), sandbox_parent=ws["sandboxes"])


def run(ws: dict, command_runner: CommandRunner, n: int = 1, progress=None):
    return command_runner.run_batch(package_dir=ws["package"], skill_sha256="abc123", task=ws["task"],
                                    batch="section-i00", n=n, archive_dir=ws["archive"], progress=progress)


def test_claude_stream_agent_gives_labelled_traces_with_tool_steps(workspace):
    seen = []
    traces = run(workspace, runner(workspace, agent("claude_stream_agent.py", "-p", "{prompt}"), "claude-stream-json"),
                 n=3, progress=lambda index, trace: seen.append((index, trace.trace_id)))
    assert [t.trace_id for t in traces] == ["section-i00-r0", "section-i00-r1", "section-i00-r2"]
    assert sorted(seen) == [(0, "section-i00-r0"), (1, "section-i00-r1"), (2, "section-i00-r2")]
    for trace in traces:
        assert trace.error_category is None, trace.error_reason
        assert (trace.batch, trace.skill_sha256, trace.model) == ("section-i00", "abc123", "anthropic/claude-test")
        assert trace.agent == "claude_stream_agent.py"
        # The prompt reached the agent as one argument, untouched by any shell.
        assert trace.final_output == f"answered: {PROMPT}"
        calls = [call for step in trace.steps for call in step.tool_calls]
        assert [c.name for c in calls] == ["Bash", "Write"]
        tool_texts = [s.text for s in trace.steps if s.source == "tool"]
        assert tool_texts[0] == "---"  # the skill was installed where Claude Code looks
        assert "/work/answer.txt" in tool_texts[1]
        assert (trace.prompt_tokens, trace.completion_tokens, trace.cost_usd) == (100, 20, 0.0123)
        assert trace.duration_s is not None and trace.duration_s > 0
    assert (workspace["archive"] / "2" / "stdout.txt").read_text().count("\n") == 7  # every event line kept
    assert list(workspace["sandboxes"].iterdir()) == []  # every workdir removed after archiving


def test_agent_that_exits_1_is_an_agent_error_with_its_stderr(workspace):
    [trace] = run(workspace, runner(workspace, agent("exit_one.py"), "claude-stream-json"))
    assert trace.error_category == "agent_error"
    assert "exited with status 1" in trace.error_reason
    assert "could not reach the model" in trace.error_reason
    assert "could not reach" in (workspace["archive"] / "0" / "stderr.txt").read_text()


def test_garbage_output_is_an_agent_error_counting_bad_lines(workspace):
    [trace] = run(workspace, runner(workspace, agent("garbage.py"), "claude-stream-json"))
    assert trace.error_category == "agent_error"
    assert "3 of 4 stdout lines" in trace.error_reason
    assert [s.text for s in trace.steps] == ["hi"]  # what did parse is kept as evidence


@pytest.mark.parametrize("extra", [[], ["--ignore-term"], ["--setsid-child"], ["--escape", "--ignore-term"]],
                         ids=["sigterm", "needs-sigkill", "child-left-the-group", "child-left-session-and-env"])
def test_hanging_agent_is_killed_at_its_timeout_with_its_children(workspace, tmp_path, extra):
    pidfile = tmp_path / "pids"
    hang = runner(workspace, agent("hang.py", "--pidfile", str(pidfile), *extra), timeout_s=1.5, kill_grace_s=0.5)
    started = time.monotonic()
    [trace] = run(workspace, hang)
    assert time.monotonic() - started < 6
    assert trace.error_category == "timeout" and trace.timed_out
    assert "1.5 s" in trace.error_reason
    (child, parent), namespace = read_pids(pidfile)
    assert not alive_in(child, namespace) and not alive_in(parent, namespace)
    assert "working..." in (workspace["archive"] / "0" / "stdout.txt").read_text()


def test_silent_agent_hits_the_idle_timeout(workspace, tmp_path):
    pidfile = tmp_path / "pids"
    idle = runner(workspace, agent("hang.py", "--pidfile", str(pidfile)), timeout_s=30, idle_timeout_s=0.8)
    started = time.monotonic()
    [trace] = run(workspace, idle)
    assert time.monotonic() - started < 5
    assert trace.error_category == "idle_timeout" and trace.timed_out
    pids, namespace = read_pids(pidfile)
    assert not any(alive_in(pid, namespace) for pid in pids)


def test_flooding_agent_is_capped_and_does_not_hang(workspace):
    cap = 1024 * 1024
    started = time.monotonic()
    [trace] = run(workspace, runner(workspace, agent("flood.py", "--mb", "12"), stream_cap_bytes=cap))
    assert time.monotonic() - started < 30
    assert trace.error_category is None  # it exited 0; a long answer is not a failure
    for stream in ("stdout.txt", "stderr.txt"):
        data = (workspace["archive"] / "0" / stream).read_bytes()
        assert len(data) < cap + 200
        total = 12 * 1024 * 1024 + (len(b"final answer\n") if stream == "stdout.txt" else 0)
        assert data.endswith(TRUNCATION_MARKER.format(cap=cap, dropped=total - cap).encode())
    assert "output truncated" in trace.final_output


def test_a_flood_is_stored_once_in_its_trace(workspace):
    """The capped stdout is the text format's one step; the final output does not repeat it."""
    cap = 1024 * 1024
    [trace] = run(workspace, runner(workspace, agent("flood.py", "--mb", "3"), stream_cap_bytes=cap))
    assert len(trace.model_dump_json()) < 1.1 * cap
    [step] = trace.steps
    assert step.text.startswith("x" * 1023) and "output truncated" in step.text  # evidence keeps it whole
    assert trace.final_output.startswith("x" * 1023) and trace.final_output.endswith(step.text[-2000:])
    assert "the whole final output is step 1" in trace.final_output


def test_missing_agent_command_is_a_sandbox_setup_failure(workspace):
    [trace] = run(workspace, runner(workspace, "/nonexistent/agent-cli -p {prompt}"))
    assert trace.error_category == "sandbox_setup"
    assert "/nonexistent/agent-cli" in trace.error_reason
    assert list(workspace["sandboxes"].iterdir()) == []


def test_agent_programs_are_found_where_the_rollout_will_run_them(workspace, tmp_path):
    """Registration checks the program as the workdir will hold it: task copy plus installed skill."""
    from deep_pipeline.rollouts.command import check_program

    task_dir, package = workspace["task"].task_dir, workspace["package"]
    (task_dir / "agent.sh").write_text("#!/bin/sh\necho hi\n")
    (task_dir / "agent.sh").chmod(0o755)
    (package / "scripts" / "run.sh").chmod(0o755)
    where = {"task_dir": task_dir, "skill_root": package, "skill_name": "demo"}
    for template in (f"{shlex.quote(sys.executable)} -c pass", "sh -c {prompt}", "./agent.sh {prompt}",
                     "{workdir}/agent.sh", "{skill_dir}/scripts/run.sh", ".claude/skills/demo/scripts/run.sh",
                     "{model} --print"):
        check_program(template, **where)  # none refused
    (package / "scripts" / "run.sh").chmod(0o644)
    with pytest.raises(InputError, match="agent_command: program 'skills/demo/scripts/run.sh' is not executable"):
        check_program("skills/demo/scripts/run.sh", **where)
    with pytest.raises(InputError, match="agent_command: program './agent.sh' does not exist"):
        check_program("./agent.sh", **{**where, "task_dir": tmp_path / "empty"})


def test_agent_sees_only_the_allowlist_and_its_models_key(workspace, monkeypatch):
    monkeypatch.setenv("DEEP_TEST_SECRET", "do-not-leak-1234")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-for-the-agent")
    [trace] = run(workspace, runner(workspace, agent("env_dump.py")))
    env = json.loads(trace.final_output)
    assert "DEEP_TEST_SECRET" not in env and "OPENAI_API_KEY" not in env
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "ANTHROPIC_API_KEY",
                        "DEEP_PIPELINE_ROLLOUT"}
    assert env["HOME"].startswith(str(workspace["sandboxes"]))  # a temp HOME, not the user's
    # The agent got its key, but the archive and the trace never hold its value.
    assert env["ANTHROPIC_API_KEY"] == "<redacted>"
    assert "sk-ant-for-the-agent" not in (workspace["archive"] / "0" / "stdout.txt").read_text()


def test_openai_model_gets_openai_key_and_no_other_secret(workspace, monkeypatch):
    monkeypatch.setenv("DEEP_TEST_SECRET", "do-not-leak-1234")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-for-the-agent")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-for-openai")
    [trace] = run(workspace, runner(workspace, agent("env_dump.py"), model="openai/gpt-test"))
    env = json.loads(trace.final_output)
    assert "OPENAI_API_KEY" in env
    assert "ANTHROPIC_API_KEY" not in env and "DEEP_TEST_SECRET" not in env


def test_jsonl_agent_steps_are_numbered_in_order(workspace):
    [trace] = run(workspace, runner(workspace, agent("jsonl_agent.py", "{prompt}"), "jsonl"))
    assert trace.error_category is None
    assert [(s.step, s.source) for s in trace.steps] == [(1, "user"), (2, "agent"), (3, "tool"), (4, "agent")]
    assert trace.steps[0].text == PROMPT
    assert trace.steps[1].tool_calls[0].arguments == "ls"
    assert trace.final_output == "all done"


def test_missing_task_directory_is_refused_before_any_rollout(workspace, tmp_path):
    task = RolloutTask(prompt="p", task_dir=tmp_path / "nowhere", skill_name="demo")
    with pytest.raises(InputError, match="nowhere: task directory does not exist"):
        runner(workspace, agent("env_dump.py")).run_batch(
            package_dir=workspace["package"], skill_sha256="x", task=task, batch="b", n=3,
            archive_dir=workspace["archive"])
    assert list(workspace["sandboxes"].iterdir()) == [] and not workspace["archive"].exists()


def test_template_keeps_each_argument_whole_and_leaves_json_braces():
    argv = split_template("""claude -p {prompt} --cwd={workdir} --settings '{"skills": "{skill_dir}"}'""")
    filled = fill_template(argv, {"{prompt}": "two words", "{workdir}": "/w", "{skill_dir}": "/w/s"})
    assert filled == ["claude", "-p", "two words", "--cwd=/w", "--settings", '{"skills": "/w/s"}']


@pytest.mark.parametrize("template, message", [("claude -p '{prompt}", "cannot split"), ("   ", "empty")])
def test_bad_templates_are_input_errors(template, message):
    with pytest.raises(InputError, match=message):
        split_template(template)


def test_command_config_without_a_command_is_refused():
    with pytest.raises(InputError, match="agent_command"):
        make_runner(CompileConfig(runner="command", agent_model="anthropic/x"))


def test_agent_that_closes_its_output_is_waited_for(tmp_path):
    import time

    from deep_pipeline.rollouts.process import run_process
    from deep_pipeline.rollouts.sandbox import SandboxLimits

    flag = tmp_path / "done_flag"
    script = Path(__file__).parent / "agents" / "closes_stdout.sh"
    started = time.monotonic()
    result = run_process(["sh", str(script), str(flag)], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                         limits=SandboxLimits(timeout_s=20, idle_timeout_s=20))
    assert flag.exists() and time.monotonic() - started >= 1
    assert result.returncode == 0


def test_an_interrupted_batch_stops_its_running_agents_at_once(tmp_path):
    import pytest as _pytest

    from deep_pipeline.core.models import Trace
    from deep_pipeline.rollouts.base import run_parallel
    from deep_pipeline.rollouts.process import run_process
    from deep_pipeline.rollouts.sandbox import SandboxLimits

    def rollout(index: int) -> Trace:
        seconds = "0.2" if index == 0 else "60"
        run_process(["sleep", seconds], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                    limits=SandboxLimits(timeout_s=90, idle_timeout_s=90))
        return Trace(trace_id=f"b-r{index}")

    def interrupt(index, trace):
        raise KeyboardInterrupt  # Ctrl-C while two agents still run

    started = time.monotonic()
    with _pytest.raises(KeyboardInterrupt):
        run_parallel(3, 3, rollout, interrupt)
    assert time.monotonic() - started < 15  # not the agents' 60 s


def test_a_rollout_without_its_own_pid_namespace_says_so(workspace, monkeypatch, caplog):
    """Issue 21 item 29: where no namespace can be made, today's group and marker remain, and the
    rollout's archived command records why; the driver warns once per reason."""
    import logging

    from deep_pipeline.rollouts import process

    monkeypatch.setattr(process, "CONTAIN", False)
    [trace] = run(workspace, runner(workspace, shlex.join([sys.executable, "-c", "print('hi')"])))
    assert trace.error_category is None
    command = json.loads((workspace["archive"] / "0" / "command.json").read_text())
    assert command["uncontained"] == "containment not asked for"

    read, write = os.pipe()
    os.write(write, b"ok 42 uncontained: no PID namespace (Operation not permitted)\n")
    os.close(write)
    monkeypatch.setattr(process, "CONTAIN", True)
    with caplog.at_level(logging.WARNING):
        assert process._guard_status(read, ["agent"]) == (None, "no PID namespace (Operation not permitted)")
    assert "rollouts run without a PID namespace of their own (no PID namespace" in caplog.text
