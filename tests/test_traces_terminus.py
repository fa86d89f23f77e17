"""SkillsBench's terminus-2 trials (SPEC §2): `agent/trajectory.json` is a list of
`{episode, prompt, response}`, not ATIF. The fixture is synthetic, in that shape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from deep_pipeline.cli import main
from deep_pipeline.traces import import_sources
from deep_pipeline.traces.terminus import task_text

TRIAL = Path(__file__).parent / "fixtures" / "traces" / "terminus" / "sql-audit__T2ep001"
INSTRUCTION = "Audit app.py for SQL injection.\n\nWrite findings.md with one line per finding; it's due today."


def test_a_terminus_2_trial_imports_episode_by_episode():
    (item,) = import_sources([TRIAL])
    trace = item.trace
    assert (item.format, item.task_name, trace.trace_id) == ("harbor", "sql-audit", "sql-audit__T2ep001")
    assert (trace.agent, trace.model, trace.prompt) == ("terminus-2", "openai/gpt-5", INSTRUCTION)
    assert [(s.source, s.tool_name) for s in trace.steps] == [
        ("user", None), ("agent", None), ("tool", "keystrokes"), ("agent", None), ("tool", "keystrokes"),
        ("agent", None)]
    first = trace.steps[0].text
    assert first.startswith("You are an AI assistant") and "Current terminal state:" in first
    assert [(c.name, c.arguments) for c in trace.steps[1].tool_calls] == [
        ("keystrokes", "cat .agents/skills/sql-audit/SKILL.md\n"), ("keystrokes", "grep -n execute app.py\n")]
    assert trace.steps[1].text == ("analysis: The shell is at /app; nothing has run yet.\n\n"
                                   "plan: Read the skill, then look for execute calls.")
    # a fenced JSON answer is the harness's JSON too
    assert [c.arguments for c in trace.steps[3].tool_calls] == ["echo 'app.py:12 f-string in SQL' > findings.md\n"]
    assert trace.steps[4].text.startswith("New Terminal Output:")
    assert trace.final_output.startswith("analysis: findings.md is written.")
    assert (trace.prompt_tokens, trace.completion_tokens, trace.cost_usd) == (4000, 500, 0.04)


def test_the_trajectory_file_alone_and_the_bundle(tmp_path, capsys):
    (item,) = import_sources([TRIAL / "agent" / "trajectory.json"])
    assert (item.format, item.trace.trace_id, len(item.trace.steps)) == ("terminus-2", "sql-audit__T2ep001", 6)
    out = tmp_path / "bundle.json"
    assert main(["import-traces", str(TRIAL), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["task_name"], data["prompt"], data["agent"]) == ("sql-audit", INSTRUCTION, "terminus-2")


def test_a_response_that_is_not_the_harness_json_is_kept_as_it_is(tmp_path):
    trial = tmp_path / TRIAL.name
    shutil.copytree(TRIAL, trial)
    log = trial / "agent" / "trajectory.json"
    episodes = json.loads(log.read_text())
    episodes[2]["response"] = "<response><analysis>done</analysis></response>"
    del episodes[1]["response"]  # an episode cut off before the model answered
    log.write_text(json.dumps(episodes))
    trace = import_sources([trial])[0].trace
    assert [s.source for s in trace.steps] == ["user", "agent", "tool", "tool", "agent"]
    assert trace.steps[-1].text == "<response><analysis>done</analysis></response>"
    assert trace.steps[-1].tool_calls == []


def test_the_task_text_is_cut_from_terminus_2s_first_prompt():
    assert task_text("intro\nTask Description:\nDo X.\n\nCurrent terminal state:\n$ ") == "Do X."
    assert task_text("Just do X.") == "Just do X."
