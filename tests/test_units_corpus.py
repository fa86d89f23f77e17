"""Units of the real skills in the shared corpus, as written and converted to CRLF (SPEC §4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from deep_pipeline.core.edits import prepare_edit
from deep_pipeline.core.units import (
    cut_paragraphs,
    cut_sections,
    front_matter_end,
    heading_line,
    line_starts,
    split_depth,
    unit_body,
)

CORPUS = Path(__file__).parents[2] / "shared/corpus/skills"
SKILLS = sorted(CORPUS.glob("*/SKILL.md")) if CORPUS.is_dir() else []
MD = MarkdownIt("commonmark").enable("table")
pytestmark = pytest.mark.skipif(not SKILLS, reason=f"no corpus of real skills at {CORPUS}")


def read(path: Path, ending: str) -> str:
    text = path.read_bytes().decode("utf-8")
    return text.replace("\n", ending)


def fenced_ranges(text: str) -> list[tuple[int, int]]:
    """(first, last) offsets of the inside of every fence or code block, at any depth."""
    body_start = front_matter_end(text)
    starts = [body_start + s for s in line_starts(text[body_start:])] + [len(text)]
    tokens = MarkdownIt("commonmark").parse(text[body_start:])
    return [(starts[t.map[0]] + 1, starts[t.map[1]] - 1) for t in tokens if t.type in ("fence", "code_block")]


@pytest.fixture(params=["\n", "\r\n"], ids=["lf", "crlf"])
def ending(request):
    return request.param


@pytest.mark.parametrize("path", SKILLS, ids=[p.parent.name for p in SKILLS])
def test_units_tile_every_corpus_skill(path, ending):
    text = read(path, ending)
    sections = cut_sections(text)
    assert sections[0].start == front_matter_end(text) > 0
    assert sections[-1].end == len(text)
    units = list(sections)
    for before, after in zip(sections, sections[1:]):
        assert before.end == after.start
    for section in sections:
        paragraphs = cut_paragraphs(text, section)
        for before, after in zip(paragraphs, paragraphs[1:]):
            assert before.end == after.start
        assert not paragraphs or paragraphs[-1].end == section.end
        units += paragraphs
    fences = fenced_ranges(text)
    for unit in units:
        assert text[unit.start : unit.end] == unit.text
        assert not any(first <= unit.start <= last for first, last in fences), f"{unit.unit_id} cuts a fence"


@pytest.mark.parametrize("path", SKILLS, ids=[p.parent.name for p in SKILLS])
def test_crlf_gives_the_same_units(path):
    lf, crlf = read(path, "\n"), read(path, "\r\n")
    for mine, theirs in zip(cut_sections(lf), cut_sections(crlf), strict=True):
        assert (mine.unit_id, mine.heading, mine.heading_depth) == (theirs.unit_id, theirs.heading, theirs.heading_depth)
        assert theirs.text == mine.text.replace("\n", "\r\n")
        assert [p.unit_id for p in cut_paragraphs(lf, mine)] == [p.unit_id for p in cut_paragraphs(crlf, theirs)]


@pytest.mark.parametrize("path", SKILLS, ids=[p.parent.name for p in SKILLS])
def test_an_editor_returning_each_body_unchanged_changes_nothing(path, ending):
    # The editor sends LF text even for a CRLF file; nothing may drift byte-wise, so the
    # completed text is exactly the unit again, which the validator refuses as unchanged.
    text = read(path, ending)
    sections = cut_sections(text)
    for section in sections:
        check = prepare_edit(text, sections, section.unit_id, unit_body(section).replace("\r\n", "\n"))
        assert not check.ok and "identical" in check.reason, (section.unit_id, check.reason)


def by_name(name: str) -> str:
    return read(CORPUS / name / "SKILL.md", "\n")


def test_mcp_builder_cuts_below_its_three_h1s():
    text = by_name("mcp-builder")
    assert split_depth(text) == 3  # three H1s; four H3 phases repeat within "# Process"
    sections = cut_sections(text)
    assert [(s.heading, s.heading_depth) for s in sections] == [
        ("Overview", 2),
        ("Phase 1: Deep Research and Planning", 3),
        ("Phase 2: Implementation", 3),
        ("Phase 3: Review and Test", 3),
        ("Phase 4: Create Evaluations", 3),
        ("Core MCP Documentation (Load First)", 3),
        ("SDK Documentation (Load During Phase 1/2)", 3),
        ("Language-Specific Implementation Guides (Load During Phase 2)", 3),
        ("Evaluation Guide (Load During Phase 4)", 3),
    ]
    # The H1 title had nothing under it, "## 🚀 High-Level Workflow" only the lead-in that
    # introduces the phases: both head the section they merged into, byte-exact.
    assert heading_line(sections[1]) == (
        "# Process\n\n## 🚀 High-Level Workflow\n\n"
        "Creating a high-quality MCP server involves four main phases:\n\n"
        "### Phase 1: Deep Research and Planning\n"
    )
    assert [s.unit_id for s in sections][:2] == ["s01-overview", "s04-phase-1-deep-research"]
    assert "#### 4.4 Output Format" in sections[4].text  # H4s stay inside their section
    assert max(len(s.text) for s in sections) < 3200


@pytest.mark.parametrize("path", SKILLS, ids=[p.parent.name for p in SKILLS])
def test_no_section_is_only_a_heading(path, ending):
    text = read(path, ending)
    for section in cut_sections(text):
        assert unit_body(section).strip(" \t\r\n"), f"{section.unit_id} has nothing under its heading"


@pytest.mark.parametrize("path", SKILLS, ids=[p.parent.name for p in SKILLS])
def test_no_paragraph_unit_is_a_lone_lead_in(path, ending):
    # mcp-builder's "four main phases:" was all its section held: that section now heads
    # the next one, so not even a section's only unit is a lone lead-in.
    text = read(path, ending)
    for section in cut_sections(text):
        for paragraph in cut_paragraphs(text, section):
            blocks = [t for t in MD.parse(paragraph.text) if t.level == 0 and t.nesting >= 0]
            lone = len(blocks) == 1 and blocks[0].type == "paragraph_open"
            assert not (lone and paragraph.text.rstrip(" \t\r\n").endswith(":")), paragraph.unit_id


@pytest.mark.parametrize("path", SKILLS, ids=[p.parent.name for p in SKILLS])
def test_paragraphs_tile_each_section_after_its_head(path, ending):
    text = read(path, ending)
    for section in cut_sections(text):
        paragraphs = cut_paragraphs(text, section)
        head_end = section.start + len(heading_line(section))
        assert paragraphs, section.unit_id
        assert text[head_end : paragraphs[0].start].strip(" \t\r\n") == ""  # only blank lines before
        assert "".join(p.text for p in paragraphs) == text[paragraphs[0].start : section.end]


def test_skill_creator_headings_in_a_markdown_fence_do_not_cut():
    text = by_name("skill-creator")
    sections = cut_sections(text)
    assert split_depth(text) == 2
    assert [s.heading for s in sections] == [
        "Skill Creator",
        "Communicating with the user",
        "Creating a skill",
        "Running and evaluating test cases",
        "Improving the skill",
        "Advanced: Blind comparison",
        "Description Optimization",
        "Claude.ai-specific instructions",
        "Cowork-Specific Instructions",
        "Reference files",
    ]
    assert len(fenced_ranges(text)) >= 10  # the tiling test checks no unit starts inside one
    creating = sections[2]
    assert "## Report structure" in creating.text and "# [Title]" in creating.text
    assert not any(p.text.startswith("## Report structure") for p in cut_paragraphs(text, creating))


def test_internal_comms_has_no_preamble_and_starts_after_the_front_matter():
    text = by_name("internal-comms")
    first = cut_sections(text)[0]
    assert first.unit_id == "s00-when-to-use-this-skill"
    assert first.start == front_matter_end(text)
    assert first.text.startswith("\n## When to use this skill\n")
