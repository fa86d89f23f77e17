"""The revised cutting rules of SPEC §4 (docs/spec-revisions.md): units people recognise.

Heading-only sections merge into the next one, several H1s cut at the depth their
stretches repeat, and lead-ins (`Example:`) join the block they introduce.
"""

from __future__ import annotations

import pytest

from deep_pipeline.core.edits import prepare_edit
from deep_pipeline.core.units import (
    cut_paragraphs,
    cut_sections,
    heading_line,
    section_outline,
    split_depth,
    unit_body,
)

FM = "---\nname: demo\ndescription: rules\n---\n"


@pytest.fixture(params=["\n", "\r\n"], ids=["lf", "crlf"])
def ending(request):
    return request.param


def doc(body: str, ending: str = "\n") -> str:
    return (FM + body).replace("\n", ending)


def sections_of(text):
    sections = cut_sections(text)
    assert "".join(s.text for s in sections) == text[sections[0].start :]
    return sections


# ---------------------------------------------------------------- heading-only sections


def test_a_title_with_nothing_under_it_merges_into_the_next_section(ending):
    text = doc("# PDF Guide\n\n## Overview\n\nRead PDFs.\n\n## Usage\n\nRun it.\n", ending)
    first, second = sections_of(text)
    # Ids number the cuts before merging: the title's s00 is skipped, every other id is as it was.
    assert (first.unit_id, first.heading, first.heading_depth) == ("s01-overview", "Overview", 2)
    assert heading_line(first) == doc("# PDF Guide\n\n## Overview\n", ending)[len(FM.replace("\n", ending)) :]
    assert unit_body(first) == "\nRead PDFs.\n\n".replace("\n", ending)
    assert second.unit_id == "s02-usage"
    # The title is still in the outline: an edit may neither drop nor alter it.
    assert section_outline(text) == [("PDF Guide", 1), ("Overview", 2), ("Usage", 2)]
    paragraphs = cut_paragraphs(text, first)
    assert [p.text for p in paragraphs] == ["Read PDFs.\n\n".replace("\n", ending)]


def test_a_run_of_heading_only_sections_merges_into_the_first_with_a_body():
    text = doc("# T\n\n## Part\n\n\n## Step\n\nDo it.\n\n## Next\n\nMore.\n")
    first, _ = sections_of(text)
    assert first.heading == "Step" and heading_line(first) == "# T\n\n## Part\n\n\n## Step\n"


def test_a_heading_only_section_at_the_end_stays_a_section_of_its_own():
    # Merged backwards it would sit in the body of the section before, which an edit rewrites.
    text = doc("## A\n\nText.\n\n## B\n")
    assert [(s.unit_id, s.text) for s in sections_of(text)] == [("s00-a", "## A\n\nText.\n\n"), ("s01-b", "## B\n")]
    assert cut_paragraphs(text, cut_sections(text)[1]) == []


def test_a_body_of_only_headings_is_one_section():
    text = doc("# T\n\n## A\n")
    (only,) = sections_of(text)
    assert only.heading == "A" and unit_body(only) == ""


def test_a_deeper_sub_heading_is_a_body_not_a_merge():
    text = doc("## A\n\n### Sub\n\n## B\n\nb\n")
    first, second = sections_of(text)
    assert first.heading == "A" and heading_line(first) == "## A\n"
    assert [p.text for p in cut_paragraphs(text, first)] == ["### Sub\n\n"]


def test_the_merged_head_is_reattached_byte_exact_and_protected(ending):
    text = doc("# Title\n\n## Overview\n\nOld text.\n\n## Usage\n\nRun it.\n", ending)
    sections = cut_sections(text)
    check = prepare_edit(text, sections, "s01-overview", "New text.")
    assert check.ok, check.reason
    assert check.unit_text == "\n# Title\n\n## Overview\n\nNew text.\n\n".replace("\n", ending)[len(ending) :]
    # An edit that repeats the title as a new heading is refused: the title is still a cut.
    repeated = prepare_edit(text, sections, "s01-overview", "# Title\n\nNew text.")
    assert not repeated.ok


def test_a_heading_with_only_a_lead_in_heads_the_section_it_introduces(ending):
    body = "## Workflow\n\nIt has two phases:\n\n### Phase 1\n\nOne.\n\n### Phase 2\n\nTwo.\n"
    text = doc(body, ending)
    sections = cut_sections(text)
    assert [(s.unit_id, s.heading) for s in sections] == [("s01-phase-1", "Phase 1"), ("s02-phase-2", "Phase 2")]
    head = "## Workflow\n\nIt has two phases:\n\n### Phase 1\n".replace("\n", ending)
    assert heading_line(sections[0]) == head
    assert [p.text for p in cut_paragraphs(text, sections[0])] == ["One.\n\n".replace("\n", ending)]
    # The lead-in is part of the head: an edit keeps it byte-exact.
    check = prepare_edit(text, sections, "s01-phase-1", "First.")
    assert check.ok and check.unit_text.startswith(head), check.reason


@pytest.mark.parametrize(
    "body",
    [
        "## A\n\nSee:\n\n[x]: https://example.org\n\n## B\n\nb\n",  # a link definition is content
        "## A\n\nText, then:\n\n- item\n\n## B\n\nb\n",  # the lead-in has its block
        "## A\n\nb\n\n## B\n\nSee below:\n",  # nothing follows: stays a section of its own
    ],
)
def test_a_lead_in_merges_only_when_it_is_all_a_heading_holds(body):
    assert [s.heading for s in sections_of(doc(body))] == ["A", "B"]


# ---------------------------------------------------------------- several H1s


def test_several_h1s_cut_at_the_depth_their_stretches_repeat(ending):
    body = "# Guide\n\n## Overview\n\nIntro.\n\n# Process\n\n## Workflow\n\nFour phases.\n\n" \
        "### Phase 1\n\nOne.\n\n### Phase 2\n\nTwo.\n\n# Reference\n\n## Library\n\nBooks.\n"
    text = doc(body, ending)
    assert split_depth(text) == 3
    assert [(s.heading, s.heading_depth) for s in sections_of(text)] == [
        ("Overview", 2), ("Workflow", 2), ("Phase 1", 3), ("Phase 2", 3), ("Library", 2),
    ]
    assert heading_line(cut_sections(text)[1]) == "# Process\n\n## Workflow\n".replace("\n", ending)


def test_an_edit_may_not_add_a_heading_at_the_refined_depth():
    text = doc("# A\n\n### x\n\nx\n\n### y\n\ny\n\n# B\n\nb\n")
    sections = cut_sections(text)
    assert split_depth(text) == 3
    check = prepare_edit(text, sections, sections[0].unit_id, "x\n\n### New step\n\nmore")
    assert not check.ok and "depth 3 or less" in check.reason


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        ("# A\n\na\n\n# B\n\nb\n", 1),  # two H1s, nothing deeper
        ("# A\n\na\n\n### only\n\nx\n\n# B\n\nb\n", 1),  # one deeper heading does not explode it
        ("# A\n\n## x\n\nx\n\n# B\n\n## y\n\ny\n", 1),  # H2s repeat only across H1s, not within one
        ("# A\n\n## x\n\nx\n\n## y\n\ny\n\n# B\n\nb\n", 2),
        ("## p\n\np\n\n## q\n\nq\n\n# A\n\na\n\n# B\n\nb\n", 2),  # the stretch before the first H1 counts
        ("# A\n\n### x\n\nx\n\n### y\n\ny\n\n## z\n\nz\n\n# B\n\nb\n", 3),  # the shallowest repeated within one
    ],
)
def test_refined_split_depth_and_its_traps(body, depth):
    text = doc(body)
    assert split_depth(text) == depth
    assert all(h[1] <= depth for h in section_outline(text))


# ---------------------------------------------------------------- lead-ins


def paragraph_texts(body: str, ending: str = "\n") -> list[str]:
    text = doc("## A\n\n" + body + "## B\n\nb\n", ending)
    return [p.text.replace(ending, "\n") for p in cut_paragraphs(text, cut_sections(text)[0])]


def test_a_lead_in_joins_the_block_it_introduces(ending):
    assert paragraph_texts("Text.\n\nExample:\n\n```\nrun\n```\n\nAfter.\n\n", ending) == [
        "Text.\n\n", "Example:\n\n```\nrun\n```\n\n", "After.\n\n",
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # a chain of lead-ins joins the first block that is not one
            "Example:\n\nOutput:\n\n```\nok\n```\n\n",
            ["Example:\n\nOutput:\n\n```\nok\n```\n\n"],
        ),
        ("**The script:**\n- one\n- two\n\n", ["**The script:**\n- one\n- two\n\n"]),  # bold, list interrupts
        ("### Usage\n\nRun:\n\n    cmd\n\n", ["### Usage\n\nRun:\n\n    cmd\n\n"]),  # sub-heading, lead-in, code
        ("Text.\n\nSee below:\n\n", ["Text.\n\nSee below:\n\n"]),  # a trailing lead-in stays with the unit before
        # ...and openers alone are one unit (a lead-in alone merges the section into the next one)
        ("### Usage\n\nNothing follows:\n\n", ["### Usage\n\nNothing follows:\n\n"]),
        ("Run `cmd:`\n\nText.\n\n", ["Run `cmd:`\n\n", "Text.\n\n"]),  # a code span ending in ':' is no lead-in
        ("Note: this is a sentence.\n\nText.\n\n", ["Note: this is a sentence.\n\n", "Text.\n\n"]),
        ("Text.\n\n---\n\nMore.\n\n", ["Text.\n\n---\n\n", "More.\n\n"]),  # a rule closes the unit before it
    ],
)
def test_lead_in_chains_and_traps(body, expected):
    assert paragraph_texts(body) == expected
