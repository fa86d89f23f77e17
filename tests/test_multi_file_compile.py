"""The whole skill, not only SKILL.md (SPEC §4, the package's markdown files): a compile whose
weakest cell is in `references/guide.md` edits that file and no other."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.records import RolloutsRecord
from deep_pipeline.core.growth import signed
from deep_pipeline.defs.pages import growth_meta
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.status import compile_status, format_status
from deep_pipeline.engine.steps import run_step, run_steps
from deep_pipeline.report.gather import gather
from deep_pipeline.report.render import render
from deep_pipeline.store import package_files, read_model
from tests.compile_world import CONFIG, MARK, World, install_world
from tests.multi_world import make_multi_inputs

GUIDE_TONE = "references/guide.md#s01-tone"


def test_the_weakest_cell_in_a_reference_file_edits_that_file_and_keeps_every_other_byte(tmp_path, scripted_llm):
    world = World(low={(GUIDE_TONE, "clarity"): 1})
    install_world(scripted_llm, world)
    skill, bundle = make_multi_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    report = run_steps(ctx, run_step)

    assert [(str(d.coordinate), d.accepted) for d in report.decisions] == [(f"{GUIDE_TONE}/clarity", True)]
    # The judge saw the guide's text with its units marked, after SKILL.md's.
    column = scripted_llm.requests_for("judge")[0].text
    assert f"=== package file references/guide.md" in column and f"<<unit {GUIDE_TONE}>>" in column
    assert column.index("<<unit s03-output>>") < column.index(f"<<unit {GUIDE_TONE}>>")
    # The matrix rows: SKILL.md's sections with their ids as before, then the guide's, named by file.
    units = ctx.cdir.matrix_records()[0].matrix.units
    assert [u.unit_id for u in units] == ["s01-when-to-use", "s02-steps", "s03-output",  # the titles merge (SPEC §4)
                                          GUIDE_TONE, "references/guide.md#s02-format"]
    assert [u.file for u in units] == ["SKILL.md"] * 3 + ["references/guide.md"] * 2

    final = ctx.cdir.final_skill
    assert [p.as_posix() for p in package_files(final)] == [p.as_posix() for p in package_files(skill)]
    changed = [p.as_posix() for p in package_files(skill) if (final / p).read_bytes() != (skill / p).read_bytes()]
    assert changed == ["references/guide.md"]  # SKILL.md, the script and the note: byte for byte S_fast's
    guide = (final / "references" / "guide.md").read_text(encoding="utf-8")
    assert f"{MARK}-{GUIDE_TONE}" in guide
    assert guide.startswith("---\ntitle: Status guide\n---\n") and "## Tone\n" in guide and "## Format\n" in guide

    # report.json and the HTML report show the guide's diff.
    stored = json.loads(ctx.cdir.report_path.read_text(encoding="utf-8"))
    assert list(stored["changed_files"]) == ["references/guide.md"]
    assert f"+{MARK}-{GUIDE_TONE}" in stored["changed_files"]["references/guide.md"]
    html = render(gather(ctx.cdir))
    assert "S_final/references/guide.md" in html and f"{MARK}-{GUIDE_TONE}" in html
    # The edit's growth is the guide's, and says so wherever it is shown.
    (accepted,) = report.decisions
    grown = f"{signed(accepted.growth_chars)} chars, {signed(accepted.growth_lines)} lines in references/guide.md"
    assert accepted.growth_chars > 0 and grown in html
    status_text = format_status(compile_status(ctx))
    assert f"growth: {grown}" in status_text
    # The size of the edited file, S_fast's against S_final's, beside SKILL.md's (the report's head, status).
    before = (skill / "references" / "guide.md").read_text(encoding="utf-8")
    size = (f"S_fast {len(before)} chars, {before.count(chr(10))} lines → S_final {len(guide)} chars, "
            f"{guide.count(chr(10))} lines ({signed(len(guide) - len(before))} chars")
    assert f"<dt>references/guide.md size</dt><dd>{size}" in html
    assert f"references/guide.md: {size.replace('→ S_final', '-> now')}" in status_text
    assert compile_status(ctx).file_sizes["references/guide.md"].final_chars == len(guide)
    assert growth_meta(accepted)["growth_file"].value == "references/guide.md"
    # The final_skill asset's page names the changed file with its diff (SKILL.md's own diff as before).
    from deep_pipeline.defs.assets.output import _other_files
    meta = _other_files(ctx.cdir.unit_files(), final)
    assert meta["other_files_changed"].value == ["references/guide.md"]
    assert f"+{MARK}-{GUIDE_TONE}" in meta["other_files_diff"].value


def test_a_single_file_compile_writes_no_file_fields(tmp_path, scripted_llm):
    from tests.compile_world import make_inputs

    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(tmp_path)
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    run_steps(ctx, run_step)
    texts = [p.read_text(encoding="utf-8") for p in ctx.cdir.path.rglob("*.json")]
    assert not any('"file"' in t or '"files"' in t or "unread_files" in t or "changed_files" in t for t in texts)
    assert "opened_files" not in ctx.cdir.report_path.read_text(encoding="utf-8")  # its report reads as before


AGENT = Path(__file__).parent / "agents" / "skill_reader_agent.py"


def test_cells_of_a_file_no_rollout_opened_are_not_selected(tmp_path, scripted_llm):
    # The agent cats SKILL.md and never opens the guide: the guide's weak cell is scored, marked
    # and told to the judge, but never selected; SKILL.md's weaker-ranked cell is.
    world = World(low={(GUIDE_TONE, "clarity"): 1, ("s02-steps", "clarity"): 2})
    install_world(scripted_llm, world)
    skill, bundle = make_multi_inputs(tmp_path)
    data = json.loads(bundle.read_text(encoding="utf-8"))
    for trace in data["traces"]:  # the input traces show their calls too: they cat SKILL.md only
        trace["steps"].insert(1, {"step": 2, "source": "agent", "text": "reading", "tool_calls": [
            {"name": "bash", "arguments": "cat .claude/skills/demo-skill/SKILL.md"}]})
        for number, step in enumerate(trace["steps"], start=1):
            step["step"] = number
    bundle.write_text(json.dumps(data), encoding="utf-8")
    command = " ".join(shlex.quote(a) for a in (sys.executable, str(AGENT))) + " {prompt} {skill_dir} read"
    config = effective_config(load_deployment(), {
        **CONFIG, "runner": "command", "agent_command": command, "agent_output_format": "jsonl"})
    record = register_compile(tmp_path / "store", skill, bundle, config)
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    report = run_steps(ctx, run_step)

    assert report.decisions and all("#" not in d.coordinate.unit_id for d in report.decisions)
    assert [m.matrix.unread_files for m in ctx.cdir.matrix_records()][0] == ["references/guide.md"]
    column = scripted_llm.requests_for("judge")[0].text
    assert "=== package file references/guide.md (no rollout opened this file" in column
    first = report.decisions[0]
    rollouts = read_model(ctx.cdir.iteration_dir(first.level, first.index) / "rollouts.json", RolloutsRecord)
    assert {tuple(u.opened_files) for u in rollouts.skill_use} == {("SKILL.md",)}
    # The report counts, per iteration, the rollouts that opened each file.
    stored = json.loads(ctx.cdir.report_path.read_text(encoding="utf-8"))
    traces = len(rollouts.skill_use)
    assert stored["skill_use"][0]["opened_files"] == {"SKILL.md": traces}
    assert f"opened SKILL.md {traces}/{traces}" in render(gather(ctx.cdir))
    assert (ctx.cdir.final_skill / "references" / "guide.md").read_bytes() == (skill / "references" / "guide.md").read_bytes()


def test_a_descent_into_a_reference_files_section_edits_one_of_its_paragraphs(tmp_path, scripted_llm):
    tone, second = GUIDE_TONE, f"{GUIDE_TONE}-p01"
    world = World(low={(tone, "clarity"): 2, (second, "clarity"): 2}, compare={(tone, "clarity"): (2, 2)})
    install_world(scripted_llm, world)
    skill, bundle = make_multi_inputs(tmp_path)
    guide = skill / "references" / "guide.md"
    original = guide.read_text(encoding="utf-8").replace("Keep it short.\n", "Keep it short.\n\nName the owner.\n")
    guide.write_text(original, encoding="utf-8")
    record = register_compile(tmp_path / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    ctx = CompileHandle.open(tmp_path / "store", record.key)
    report = run_steps(ctx, run_step)

    accepted = [str(d.coordinate) for d in report.decisions if d.accepted]
    assert accepted == [f"{second}/clarity"]
    assert [lv.section_id for lv in report.levels] == [None, tone]
    final = (ctx.cdir.final_skill / "references" / "guide.md").read_text(encoding="utf-8")
    assert final == original.replace("Name the owner.\n", f"{MARK}-{second} attempt {world.calls['edit']}: do the steps one by one.\n")
    assert (ctx.cdir.final_skill / "SKILL.md").read_bytes() == (skill / "SKILL.md").read_bytes()
