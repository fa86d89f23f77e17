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
    line_starts,
    split_depth,
    unit_body,
)

CORPUS = Path(__file__).parents[2] / "shared/corpus/skills"
SKILLS = sorted(CORPUS.glob("*/SKILL.md")) if CORPUS.is_dir() else []
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


def test_mcp_builder_splits_at_its_three_h1s():
    text = by_name("mcp-builder")
    assert split_depth(text) == 1  # three H1s, three H2s: the shallowest repeated depth wins
    sections = cut_sections(text)
    assert [(s.heading, s.heading_depth) for s in sections] == [
        ("MCP Server Development Guide", 1),
        ("Process", 1),
        ("Reference Files", 1),
    ]
    assert "#### 4.4 Output Format" in sections[1].text  # H4s stay inside their section


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
