"""The package's markdown files as units (core/package.py) and SPEC §5's read rule."""

from __future__ import annotations

from deep_pipeline.core.edits import replace_unit
from deep_pipeline.core.matrix import select_coordinate
from deep_pipeline.core.models import Cell, ScoreMatrix, ToolCall, Trace, TraceStep
from deep_pipeline.core.package import cut_package, file_of, unit_files
from deep_pipeline.core.skill_use import opened_files, unread_files
from deep_pipeline.core.units import cut_sections
from deep_pipeline.llm.render import mark_package, mark_units
from tests.multi_world import GUIDE, SKILL

FILES = {"SKILL.md": SKILL, "references/guide.md": GUIDE}
PATHS = ["SKILL.md", "references/guide.md", "references/deep/more.md", "forms.md", "scripts/collect.py",
         "notes.txt", "other.md"]


def test_the_unit_files_are_linked_named_in_backticks_or_under_references():
    text = SKILL + "\nFill `forms.md` in; see [site](https://x.org/a.md) and [gone](missing.md).\n"
    assert unit_files(text, PATHS) == ["forms.md", "references/deep/more.md", "references/guide.md"]
    # A script named in backticks is never a unit; a markdown file nothing names is not one either.
    assert "scripts/collect.py" not in unit_files(text, PATHS) and "other.md" not in unit_files(text, PATHS)


def test_ids_name_the_file_and_skill_md_ids_stay_as_they_were():
    units = cut_package(FILES, "section")
    skill_units = [u for u in units if u.file == "SKILL.md"]
    assert skill_units == cut_sections(SKILL)  # the very same units, ids and offsets
    guide = [u for u in units if u.file == "references/guide.md"]
    # The guide's title-only H1 merges into its first section (SPEC §4 revised): no s00.
    assert [u.unit_id for u in guide] == ["references/guide.md#s01-tone", "references/guide.md#s02-format"]
    assert all(GUIDE[u.start:u.end] == u.text for u in guide)  # offsets index the guide's own text
    assert file_of("references/guide.md#s01-tone") == "references/guide.md" and file_of("s01-tone") == "SKILL.md"
    paragraphs = cut_package(FILES, "paragraph", "references/guide.md#s01-tone")
    assert [(p.unit_id, p.section_id, p.file) for p in paragraphs][0] == (
        "references/guide.md#s01-tone-p00", "references/guide.md#s01-tone", "references/guide.md")


def test_a_reference_files_front_matter_is_never_a_unit():
    guide = [u for u in cut_package(FILES, "section") if u.file == "references/guide.md"]
    assert not any("title: Status guide" in u.text for u in guide)
    assert GUIDE[: guide[0].start] == "---\ntitle: Status guide\n---\n"  # the units start after it


def test_an_edit_shifts_only_the_units_of_its_own_file():
    units = cut_package(FILES, "section")
    after = replace_unit(units, "s01-when-to-use", "## When to use\nMuch longer text than it was before.\n\n")
    assert [u for u in after if u.file != "SKILL.md"] == [u for u in units if u.file != "SKILL.md"]


def test_a_single_file_renders_exactly_as_before_and_a_long_unit_is_cut_with_a_note():
    units = cut_sections(SKILL)
    assert mark_package({"SKILL.md": SKILL}, units) == mark_units(SKILL, units)
    capped = mark_package({"SKILL.md": SKILL}, units, cap=10)
    assert "more chars not shown; score it from this first part" in capped
    both = mark_package(FILES, cut_package(FILES, "section"), unread=["references/guide.md"])
    assert "=== package file references/guide.md (no rollout opened this file" in both


def _trace(*commands: str) -> Trace:
    steps = [TraceStep(step=1, source="user", text="go")]
    steps += [TraceStep(step=i + 2, source="agent", tool_calls=[ToolCall(name="bash", arguments=c)])
              for i, c in enumerate(commands)]
    return Trace(trace_id="t1", steps=steps)


def test_which_package_files_a_rollout_opened():
    paths = ["SKILL.md", "references/guide.md", "scripts/collect.py"]
    trace = _trace("cat .claude/skills/demo-skill/SKILL.md", "python skills/demo-skill/scripts/collect.py")
    assert opened_files(trace, "demo-skill", paths) == ["SKILL.md", "scripts/collect.py"]
    assert unread_files([trace], skill_name="demo-skill", package_files=paths,
                        unit_files=["references/guide.md"]) == ["references/guide.md"]
    read = _trace("cd skills/demo-skill && cat references/guide.md")
    assert unread_files([trace, read], skill_name="demo-skill", package_files=paths,
                        unit_files=["references/guide.md"]) is None
    # A runner whose traces show no tool calls: every file may have been read.
    assert unread_files([trace], skill_name="demo-skill", package_files=paths, unit_files=["references/guide.md"],
                        applicable=False) is None


def test_cells_of_a_file_no_rollout_opened_are_not_selected():
    units = cut_package(FILES, "section")
    cells = [Cell(unit_id=u.unit_id, dimension="clarity", score=1 if u.file != "SKILL.md" else 2) for u in units]
    matrix = ScoreMatrix(level="section", dimensions=["clarity"], units=units, cells=cells, trace_batch="input",
                         skill_sha256="x")
    pick = {"dimensions": ["clarity"], "threshold": 0.375}
    assert select_coordinate(matrix, **pick).unit_id == "references/guide.md#s01-tone"
    unread = matrix.model_copy(update={"unread_files": ["references/guide.md"]})
    assert select_coordinate(unread, **pick).unit_id == "s01-when-to-use"
    assert "unread_files" not in matrix.model_dump() and unread.model_dump()["unread_files"] == ["references/guide.md"]


def test_a_batch_without_any_tool_call_counts_every_file_as_possibly_read():
    silent = Trace(trace_id="t1", steps=[TraceStep(step=1, source="agent", text="done")])
    assert unread_files([silent], skill_name="demo-skill", package_files=["SKILL.md", "references/guide.md"],
                        unit_files=["references/guide.md"]) is None


def test_the_decision_page_lists_the_files_each_rollout_opened():
    from deep_pipeline.core.skill_use import SkillUse
    from deep_pipeline.defs.metadata import skill_use_meta

    uses = [SkillUse(trace_id="a", read_skill=True, quoted_unit=False, opened_files=["SKILL.md"]),
            SkillUse(trace_id="b", read_skill=True, quoted_unit=False, opened_files=["SKILL.md", "references/guide.md"])]
    shown = skill_use_meta(uses, "command", "jsonl")["opened_files"].value
    assert shown == "- a: SKILL.md\n- b: SKILL.md, references/guide.md"
    assert "possibly read" in skill_use_meta([], "chat", "text")["opened_files"].value
