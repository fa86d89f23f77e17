"""Did the agent use the edit?: per trace, did it read the skill and quote
the edited unit; recorded and shown, never a rule."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from deep_pipeline.core.models import ToolCall, Trace, TraceStep
from deep_pipeline.core.skill_use import (
    NO_READ_WARNING,
    SkillUse,
    not_applicable_reason,
    quoted_unit,
    read_skill,
    share,
    share_texts,
    skill_use,
)

FILES = ["SKILL.md", "notes.txt", "scripts/fill.py"]
UNIT = """## Steps
- Collect the week's changes from the tracker,
  newest first, before you write anything.
- Short one.

Group them by project and write one line each.
"""


def trace(*steps: tuple[str, str, list[ToolCall]]) -> Trace:
    return Trace(trace_id="t0", steps=[TraceStep(step=n, source=source, text=text, tool_calls=calls)
                                       for n, (source, text, calls) in enumerate(steps, start=1)])


def calling(name: str, arguments: str, text: str = "") -> Trace:
    return trace(("user", "do the task", []), ("agent", text, [ToolCall(name=name, arguments=arguments)]))


def says(source: str, text: str) -> Trace:
    return trace(("user", "do the task", []), (source, text, []))


# -- read_skill ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, arguments", [
    ("bash", "cat .claude/skills/demo/SKILL.md"),
    ("bash", json.dumps({"command": "sed -n '1,40p' skills/demo/SKILL.md"})),
    ("Read", json.dumps({"file_path": "/tmp/deep-rollout-x/work/.claude/skills/demo/SKILL.md"})),
    ("bash", "head -5 .codex/skills/demo/notes.txt"),  # another file of the package
    ("bash", "python .opencode/skill/demo/scripts/fill.py --in data.csv"),
    ("bash", "cd skills/demo && cat SKILL.md"),
])
def test_a_tool_call_that_opens_a_package_file_reads_the_skill(name, arguments):
    assert read_skill(calling(name, arguments), "demo", FILES) is True


@pytest.mark.parametrize("name, arguments", [
    ("bash", "ls skills/demo"),  # listing the folder is not reading it
    ("bash", "cat README.md SKILL.md.bak"),
    ("bash", "cat skills/demo-old/SKILL.md"),  # another skill's folder
    ("Read", json.dumps({"file_path": "/work/other/SKILL.md"})),
    ("bash", "cat skills/demo/SKILL.md.orig"),
])
def test_a_tool_call_that_opens_no_package_file_does_not(name, arguments):
    assert read_skill(calling(name, arguments), "demo", FILES) is False


def test_only_agent_tool_calls_count_not_text_or_tool_output():
    path = "skills/demo/SKILL.md"
    assert read_skill(says("agent", f"I could read {path} later"), "demo", FILES) is False
    assert read_skill(says("tool", f"{path}\nnotes.txt"), "demo", FILES) is False
    assert read_skill(says("system", f"The skill is installed at {path}"), "demo", FILES) is False


@pytest.mark.parametrize("name, arguments", [
    ("Skill", json.dumps({"skill": "demo"})),  # Claude Code loads a skill; its text arrives injected
    ("Skill", json.dumps({"command": "demo"})),  # older Claude Code versions
    ("Skill", json.dumps({"skill": "tools:demo"})),  # a plugin's skill
    ("skill", json.dumps({"skill": "demo"})),  # BenchFlow ACP: kind "skill" names the call
    ("skill", "Skill: demo"),  # an ACP call with no rawInput keeps its title
])
def test_the_agents_own_skill_tool_naming_the_package_reads_the_skill(name, arguments):
    assert read_skill(calling(name, arguments), "demo", FILES) is True


@pytest.mark.parametrize("name, arguments", [
    ("Skill", json.dumps({"skill": "demo-old"})),  # another skill
    ("Skill", json.dumps({"skill": "pdf"})),
    ("Task", json.dumps({"prompt": "use the demo skill"})),  # not the skill tool
])
def test_a_skill_tool_call_naming_another_skill_does_not(name, arguments):
    assert read_skill(calling(name, arguments), "demo", FILES) is False


def test_the_usual_claude_code_trace_counts_as_read_not_no_rollout_read_it():
    uses = [skill_use(calling("Skill", json.dumps({"skill": "demo"})), skill_name="demo", package_files=FILES,
                      unit_text=UNIT)]
    texts = share_texts(share(uses))
    assert texts["read_skill"] == "1/1 traces" and "skill_use_warning" not in texts


# -- quoted_unit -----------------------------------------------------------------------------

def test_an_agent_step_quoting_a_line_or_a_wrapped_sentence_quotes_the_unit():
    assert quoted_unit(says("agent", "As it says: Group them by project and write one line each."), UNIT)
    # A list item wrapped over two lines in the unit, quoted on one line (whitespace folded).
    assert quoted_unit(says("agent", "Collect the week's changes from the tracker, newest first, before"), UNIT)
    # In a tool call's arguments, JSON-escaped newline and all.
    command = json.dumps({"command": "echo 'Group them by project and\nwrite one line each.' > plan.txt"})
    assert quoted_unit(calling("bash", command), UNIT)


def test_short_runs_tool_output_and_the_system_prompt_do_not_quote_it():
    assert not quoted_unit(says("agent", "Short one. Steps. one line each."), UNIT)  # under 30 chars each
    assert not quoted_unit(says("tool", UNIT), UNIT)  # the result of `cat SKILL.md`: a read, not a quote
    assert not quoted_unit(says("system", UNIT), UNIT)  # mini-swe-agent's system prompt holds SKILL.md
    assert not quoted_unit(says("agent", "group them by project and write one line each."), UNIT)  # case counts
    assert not quoted_unit(says("agent", UNIT), "")


# -- not applicable, shares ------------------------------------------------------------------

def test_runners_without_tool_calls_are_not_applicable_never_false():
    assert not_applicable_reason("chat") == "chat runner shows no tool calls"
    assert not_applicable_reason("replay") == "replay runner shows no tool calls"
    assert not_applicable_reason("command", "text") is not None
    assert not_applicable_reason("command", "jsonl") is None
    assert not_applicable_reason("mini-swe-agent") is None
    use = skill_use(calling("bash", "cat skills/demo/SKILL.md"), skill_name="demo", package_files=FILES,
                    unit_text=UNIT, applicable=False)
    assert use == SkillUse(trace_id="t0", read_skill=None, quoted_unit=None)
    assert share_texts(share([use]), not_applicable_reason("chat")) == {
        "read_skill": "n/a (chat runner shows no tool calls)",
        "quoted_edited_unit": "n/a (chat runner shows no tool calls)",
    }


def test_shares_count_traces_and_warn_when_none_read_the_skill():
    uses = [SkillUse(trace_id="a", read_skill=True, quoted_unit=True),
            SkillUse(trace_id="b", read_skill=True, quoted_unit=False),
            SkillUse(trace_id="c", read_skill=False, quoted_unit=False)]
    assert share_texts(share(uses)) == {"read_skill": "2/3 traces", "quoted_edited_unit": "1/3 traces"}
    unread = [u.model_copy(update={"read_skill": False, "quoted_unit": False}) for u in uses]
    assert share_texts(share(unread))["skill_use_warning"] == NO_READ_WARNING


def test_metadata_shows_the_shares_as_text():
    from deep_pipeline.defs.metadata import skill_use_meta

    meta = skill_use_meta([SkillUse(trace_id="a", read_skill=False, quoted_unit=False)], "command", "jsonl")
    assert {k: v.value for k, v in meta.items()} == {
        "read_skill": "0/1 traces", "quoted_edited_unit": "0/1 traces", "skill_use_warning": NO_READ_WARNING}
    assert skill_use_meta([], "chat", "text")["read_skill"].value == "n/a (chat runner shows no tool calls)"


# -- a whole compile with the command runner ---------------------------------------------------

AGENT = Path(__file__).parent / "agents" / "skill_reader_agent.py"


def _compile(tmp: Path, scripted_llm, mode: str):
    from deep_pipeline.engine.compiles import register_compile
    from deep_pipeline.engine.context import CompileHandle
    from deep_pipeline.engine.settings import effective_config, load_deployment
    from deep_pipeline.engine.steps import run_steps, run_step
    from tests.compile_world import CONFIG, World, install_world, make_inputs

    install_world(scripted_llm, World(low={("s01-when-to-use", "clarity"): 2}))
    skill, bundle = make_inputs(tmp)
    command = " ".join(shlex.quote(a) for a in (sys.executable, str(AGENT))) + f" {{prompt}} {{skill_dir}} {mode}"
    config = effective_config(load_deployment(), {
        **CONFIG, "runner": "command", "agent_command": command, "agent_output_format": "jsonl"})
    record = register_compile(tmp / "store", skill, bundle, config)
    ctx = CompileHandle.open(tmp / "store", record.key)
    return ctx, run_steps(ctx, run_step)


def test_the_share_lands_in_rollouts_json_and_the_report_and_changes_no_decision(tmp_path, scripted_llm):
    from deep_pipeline.engine.records import RolloutsRecord
    from deep_pipeline.store import read_model

    read_ctx, read_report = _compile(tmp_path / "read", scripted_llm, "read")
    skip_ctx, skip_report = _compile(tmp_path / "skip", scripted_llm, "skip")
    first = read_report.decisions[0]
    rollouts = read_model(read_ctx.cdir.iteration_dir(first.level, first.index) / "rollouts.json", RolloutsRecord)
    assert [(u.read_skill, u.quoted_unit) for u in rollouts.skill_use] == [(True, True)] * len(rollouts.trace_ids)
    skipped = read_model(skip_ctx.cdir.iteration_dir(first.level, first.index) / "rollouts.json", RolloutsRecord)
    assert [(u.read_skill, u.quoted_unit) for u in skipped.skill_use] == [(False, False)] * len(skipped.trace_ids)

    n = len(rollouts.trace_ids)
    assert (read_report.skill_use[0].read_skill, read_report.skill_use[0].quoted_unit) == (n, n)
    assert (skip_report.skill_use[0].read_skill, skip_report.skill_use[0].traces) == (0, n)
    # A signal, not a rule: the same judge decides the same whether or not the skill was read.
    assert [(str(d.coordinate), d.accepted, d.reason) for d in read_report.decisions] == \
           [(str(d.coordinate), d.accepted, d.reason) for d in skip_report.decisions]
    assert any(d.accepted for d in read_report.decisions)


def test_dagster_metadata_shows_the_share_and_warns_when_no_rollout_read_the_skill(tmp_path, monkeypatch, scripted_llm):
    import dagster as dg

    from deep_pipeline.runtime.driver import drive_compile
    from deep_pipeline.runtime.register import register_with_overrides
    from tests.compile_world import CONFIG, World, install_world, make_inputs

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    (tmp_path / "home").mkdir()
    install_world(scripted_llm, World(low={("s01-when-to-use", "clarity"): 2}))
    skill, bundle = make_inputs(tmp_path)
    command = " ".join(shlex.quote(a) for a in (sys.executable, str(AGENT))) + " {prompt} {skill_dir} skip"
    instance = dg.DagsterInstance.ephemeral()
    record, _ = register_with_overrides(instance, tmp_path / "store", skill, bundle, {
        **CONFIG, "runner": "command", "agent_command": command, "agent_output_format": "jsonl"})
    drive_compile(instance, tmp_path / "store", record.key)

    def first(asset: str) -> dict:
        found = instance.fetch_materializations(dg.AssetKey(asset), limit=100, ascending=True).records
        return {k: v.value for k, v in found[0].asset_materialization.metadata.items()}

    rollouts, decision = first("candidate_rollouts"), first("decision")
    n = len(rollouts["trace_ids"])
    for meta in (rollouts, decision):
        assert meta["read_skill"] == f"0/{n} traces" and meta["quoted_edited_unit"] == f"0/{n} traces"
        assert meta["skill_use_warning"] == NO_READ_WARNING
