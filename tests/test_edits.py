"""Local edit rules (SPEC §4): what is repaired, what is rejected, and how an edit is applied."""

from __future__ import annotations

import pytest

from deep_pipeline.core.edits import EditCheck, apply_edit, prepare_edit
from deep_pipeline.core.units import cut_paragraphs, cut_sections, section_outline

FM = "---\nname: demo\ndescription: a demo skill\n---\n"
SKILL = FM + "# Demo\n\nIntro.\n\n## Setup\n\nInstall it.\n\nThen run it.\n\n## Usage\n\nCall it.\n"


def edit(text: str, unit_id: str, new_text: str, level: str = "section") -> EditCheck:
    units = cut_sections(text)
    if level == "paragraph":
        section = next(u for u in units if unit_id.startswith(u.unit_id + "-p"))
        units = cut_paragraphs(text, section)
    return prepare_edit(text, units, unit_id, new_text)


# ---------------------------------------------------------------- accepted edits


def test_section_body_edit_reattaches_the_heading_exactly():
    check = edit(SKILL, "s01-setup", "Install it with `pip install demo`.\n")
    assert check.ok, check.reason
    assert check.unit_text == "## Setup\n\nInstall it with `pip install demo`.\n\n"
    assert check.skill_text == SKILL.replace("Install it.\n\nThen run it.\n", "Install it with `pip install demo`.\n")


def test_setext_heading_is_kept_as_a_pair():
    text = FM + "Setup\n-----\n\nold\n\nUsage\n-----\n\nu\n"
    check = edit(text, "s00-setup", "new body")
    assert check.ok, check.reason
    assert check.unit_text == "Setup\n-----\n\nnew body\n\n"


def test_a_heading_the_editor_repeated_is_not_doubled():
    check = edit(SKILL, "s01-setup", "## Setup\n\nInstall it now.")
    assert check.ok, check.reason
    assert check.unit_text == "## Setup\n\nInstall it now.\n\n"


@pytest.mark.parametrize("new_text", ["Call it twice.", "Call it twice.\n", "\n\nCall it twice.\n\n\n\n"])
def test_surrounding_blank_lines_are_restored(new_text):
    # Usage is the last section: it ends with exactly one line break, whatever the editor sent.
    check = edit(SKILL, "s02-usage", new_text)
    assert check.ok, check.reason
    assert check.unit_text == "## Usage\n\nCall it twice.\n"


def test_trailing_blank_lines_keep_the_next_heading_on_its_own_line():
    check = edit(SKILL, "s00-demo", "Intro, shorter")
    assert check.ok, check.reason
    assert "Intro, shorter\n\n## Setup\n" in check.skill_text


@pytest.mark.parametrize("ending", ["\r\n", "\r"])
def test_line_endings_follow_the_file(ending):
    text = SKILL.replace("\n", ending)
    check = edit(text, "s01-setup", "Line one.\nLine two.\r\nLine three.\n")
    assert check.ok, check.reason
    expected = f"## Setup{ending}{ending}Line one.{ending}Line two.{ending}Line three.{ending}{ending}"
    assert check.unit_text == expected
    other_breaks = check.skill_text.replace(ending, "")
    assert "\n" not in other_breaks and "\r" not in other_breaks
    assert section_outline(check.skill_text) == section_outline(text)


def test_paragraph_edit_is_the_whole_unit_and_may_add_a_deeper_heading():
    check = edit(SKILL, "s01-setup-p01", "### Running\n\nThen run it twice.", level="paragraph")
    assert check.ok, check.reason
    assert check.unit_text == "### Running\n\nThen run it twice.\n\n"
    assert section_outline(check.skill_text) == section_outline(SKILL)


def test_section_edit_may_add_a_heading_deeper_than_the_split_depth():
    check = edit(SKILL, "s01-setup", "### Install\n\nInstall it.")
    assert check.ok, check.reason


def test_preamble_edit_is_the_whole_unit():
    text = FM + "Intro.\n\n## A\n\na\n\n## B\n\nb\n"
    check = edit(text, "s00", "A better intro.")
    assert check.ok, check.reason
    assert check.unit_text == "A better intro.\n\n"


def test_heading_on_the_last_line_gets_a_line_break_before_the_body():
    text = FM + "## A\n\na\n\n## B"
    check = edit(text, "s01-b", "b body")
    assert check.ok, check.reason
    assert check.unit_text == "## B\nb body"


def test_front_matter_stays_byte_identical():
    text = "---\r\nname: demo\r\ndescription: x\r\n---\r\n\r\n## A\r\n\r\na\r\n\r\n## B\r\n"
    check = edit(text, "s00-a", "new a")
    assert check.ok, check.reason
    assert check.skill_text.startswith("---\r\nname: demo\r\ndescription: x\r\n---\r\n\r\n## A\r\n\r\nnew a\r\n\r\n")


# ---------------------------------------------------------------- rejected edits


@pytest.mark.parametrize(
    ("unit_id", "new_text", "reason_part"),
    [
        ("s01-setup", "", "empty"),
        ("s01-setup", "  \n\t\n", "empty"),
        ("s01-setup", "## Setup\n\n", "empty"),  # only the heading again
        ("s09", "text", "unknown unit id 's09'"),
        ("s01-setup", "Install.\n\n## New section\n\nmore", "adds the heading '## New section'"),
        ("s01-setup", "# Big\n\nmore", "adds the heading '# Big'"),
        ("s01-setup", "Install.\n\nTitle\n=====\n", "adds the heading '# Title'"),
        ("s01-setup", "```bash\npip install demo\n", "list of section headings"),  # swallows ## Usage
    ],
)
def test_rejections(unit_id, new_text, reason_part):
    check = edit(SKILL, unit_id, new_text)
    assert not check.ok
    assert reason_part in check.reason


def test_paragraph_may_not_add_a_heading_that_cuts_at_section_level():
    check = edit(SKILL, "s01-setup-p00", "Install it.\n\n## Sneaky\n\nx", level="paragraph")
    assert not check.ok
    assert "adds the heading '## Sneaky'" in check.reason


def test_when_no_depth_repeats_any_added_top_level_heading_is_rejected():
    text = FM + "# T\n\nt\n\n## A\n\na\n"  # split depth None: every top-level heading cuts
    check = edit(text, "s01-a", "a\n\n#### Detail\n\nd")
    assert not check.ok
    assert "any top-level heading" in check.reason


def test_stale_unit_is_rejected():
    units = cut_sections(SKILL)
    changed = SKILL.replace("Install it.", "Install it first.")
    check = prepare_edit(changed, units, "s02-usage", "Call it.")
    assert not check.ok
    assert check.reason == "target unit no longer matches"


def test_an_edit_that_would_create_front_matter_is_rejected():
    text = "Intro.\n\n## A\n\na\n\n## B\n"
    check = edit(text, "s00", "---\ntitle: x\n---\nIntro.")
    assert not check.ok
    assert "front matter" in check.reason


def test_a_heading_in_a_closed_fence_is_fine():
    check = edit(SKILL, "s01-setup", "Example:\n\n```markdown\n## Not a section\n```")
    assert check.ok, check.reason


# ---------------------------------------------------------------- apply_edit


def test_apply_edit_shifts_later_units_and_keeps_ids():
    units = cut_sections(SKILL)
    new_skill, new_units = apply_edit(SKILL, units, "s01-setup", "## Setup\n\nShort.\n\n")
    assert [u.unit_id for u in new_units] == [u.unit_id for u in units]
    assert new_units[0] == units[0]
    shift = len("## Setup\n\nShort.\n\n") - len(units[1].text)
    assert new_units[2].start == units[2].start + shift
    assert new_units[2].end == len(new_skill)
    for unit in new_units:
        assert new_skill[unit.start : unit.end] == unit.text
    assert new_units == cut_sections(new_skill)  # same headings, so cutting again agrees


def test_apply_edit_on_paragraphs_shifts_only_the_given_list():
    section = cut_sections(SKILL)[1]
    units = cut_paragraphs(SKILL, section)
    new_skill, new_units = apply_edit(SKILL, units, "s01-setup-p00", "Install it carefully.\n\n")
    assert new_units[1].text == units[1].text
    assert new_skill[new_units[1].start : new_units[1].end] == units[1].text


def test_apply_edit_refuses_unknown_or_stale_units():
    units = cut_sections(SKILL)
    with pytest.raises(ValueError, match="unknown unit id"):
        apply_edit(SKILL, units, "nope", "x")
    with pytest.raises(ValueError, match="no longer matches"):
        apply_edit(SKILL.replace("Call", "call"), units, "s02-usage", "x")


def test_prepared_skill_text_is_what_apply_edit_gives():
    units = cut_sections(SKILL)
    check = prepare_edit(SKILL, units, "s00-demo", "Intro, better.")
    assert check.ok
    assert check.skill_text == apply_edit(SKILL, units, "s00-demo", check.unit_text)[0]


def test_an_unchanged_unit_is_refused_before_any_rollout():
    from deep_pipeline.core.edits import prepare_edit
    from deep_pipeline.core.units import cut_sections, unit_body

    text = "# T\n\n## A\nBody one.\n\n## B\nBody two.\n"
    units = cut_sections(text)
    target = units[1]
    check = prepare_edit(text, units, target.unit_id, unit_body(target))
    assert not check.ok and "identical" in check.reason
