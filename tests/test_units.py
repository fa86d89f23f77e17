"""Cutting SKILL.md into sections and paragraphs (SPEC §4), rule by rule."""

from __future__ import annotations

import pytest

from deep_pipeline.core.models import Unit
from deep_pipeline.core.units import (
    cut_paragraphs,
    cut_sections,
    cut_units,
    front_matter_end,
    heading_line,
    line_starts,
    section_outline,
    split_depth,
    unit_body,
)

FM = "---\nname: demo\ndescription: a demo skill\n---\n"


def assert_tiles(text: str, units, start: int, end: int) -> None:
    assert units, "expected at least one unit"
    assert units[0].start == start
    assert units[-1].end == end
    for before, after in zip(units, units[1:]):
        assert before.end == after.start
    for unit in units:
        assert text[unit.start : unit.end] == unit.text


# ---------------------------------------------------------------- line model


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("a", [0]),
        ("a\nb\n", [0, 2]),
        ("a\r\nb\r\n", [0, 3]),
        ("a\rb\r", [0, 2]),
        ("a\r\n\rb\n\nc", [0, 3, 4, 6, 7]),
        # str.splitlines would break on these; markdown-it does not.
        ("a\u2028b\x0cc\x0bd\x85e\nf", [0, 10]),
    ],
)
def test_line_starts_follow_markdown_it_line_model(text, expected):
    assert line_starts(text) == expected


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_heading_offsets_are_right_with_any_line_ending_and_unicode_separators(ending):
    lines = ["intro with \u2028 a line separator and \x0c a form feed", "", "# One", "text", "", "# Two", "more"]
    text = ending.join(lines) + ending
    sections = cut_sections(text)
    assert [s.heading for s in sections] == [None, "One", "Two"]
    assert sections[1].text.startswith("# One" + ending)
    assert sections[2].text == "# Two" + ending + "more" + ending
    assert_tiles(text, sections, 0, len(text))


# ---------------------------------------------------------------- front matter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# Title\n", 0),
        ("", 0),
        (FM + "# T\n", len(FM)),
        ("---\r\nname: x\r\n---\r\nbody", len("---\r\nname: x\r\n---\r\n")),
        ("---\rname: x\r---\rbody", len("---\rname: x\r---\r")),
        ("--- \nname: x\n---\t\nbody", len("--- \nname: x\n---\t\n")),
        ("---\nname: x\n---", len("---\nname: x\n---")),
        ("----\nname: x\n---\n", 0),  # four dashes are a rule, not a fence
        ("text\n---\nmore\n---\n", 0),  # front matter must start on the first line
    ],
)
def test_front_matter_end(text, expected):
    assert front_matter_end(text) == expected


@pytest.mark.parametrize("text", ["---\nname: x\n", "---\nname: x\n----\n", "---"])
def test_unclosed_front_matter_is_an_error(text):
    with pytest.raises(ValueError, match="front matter is not closed"):
        front_matter_end(text)


def test_front_matter_is_never_a_unit_and_never_parsed_as_a_heading():
    # Without cutting it off, markdown-it would read "description: ...\n---" as a setext H2.
    text = FM + "Intro.\n\n## A\n\nx\n\n## B\n\ny\n"
    sections = cut_sections(text)
    assert [s.heading for s in sections] == [None, "A", "B"]
    assert sections[0].start == len(FM)


# ---------------------------------------------------------------- split depth


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("# T\n\n## A\n\n## B\n", 2),
        ("# T\n\n## A\n\n### x\n\n### y\n\n## B\n", 2),
        ("# A\n\n## x\n\n# B\n\n## y\n\n# C\n", 1),
        ("# T\n\n## A\n\n### x\n", None),  # no depth occurs twice
        ("Just text.\n", None),
        ("A\n===\n\nB\n===\n", 1),  # setext headings count
        ("# T\n\n- ## in list\n- ## in list\n\n> ## quoted\n> ## quoted\n", None),
        ("# T\n\n```\n## fenced\n## fenced\n```\n", None),
    ],
)
def test_split_depth(body, expected):
    assert split_depth(FM + body) == expected


# ---------------------------------------------------------------- sections


def headings(text):
    return [(s.unit_id, s.heading, s.heading_depth) for s in cut_sections(text)]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # non-blank text before the first cut is the preamble
            "Intro line.\n\n## A\n\na\n\n## B\n\nb\n",
            [("s00", None, None), ("s01-a", "A", 2), ("s02-b", "B", 2)],
        ),
        (  # a lone H1 is not a split depth: it heads the first section, H2s cut
            "# Title\n\nIntro.\n\n## A\n\na\n\n## B\n",
            [("s00-title", "Title", 1), ("s01-a", "A", 2), ("s02-b", "B", 2)],
        ),
        (  # no depth occurs twice: every top-level heading cuts
            "# T\n\nt\n\n## A\n\na\n\n### Deep\n\nd\n",
            [("s00-t", "T", 1), ("s01-a", "A", 2), ("s02-deep", "Deep", 3)],
        ),
        (  # deeper headings stay inside their section
            "## A\n\n### x\n\n### y\n\n## B\n\n#### z\n",
            [("s00-a", "A", 2), ("s01-b", "B", 2)],
        ),
        (  # setext headings cut like ATX ones
            "Alpha\n-----\n\ntext\n\nBeta Gamma\n----------\n\nmore\n",
            [("s00-alpha", "Alpha", 2), ("s01-beta-gamma", "Beta Gamma", 2)],
        ),
        (  # headings in lists, quotes, HTML blocks, fences and indented code do not cut
            "## A\n\n- ## item heading\n\n> ## quoted\n\n<div>\n## in html\n</div>\n\n"
            "```\n## fenced\n```\n\n    ## indented code\n\n## B\n",
            [("s00-a", "A", 2), ("s01-b", "B", 2)],
        ),
        ("", []),
        ("\n  \n\t\n", []),
        ("Only text, no heading.\n", [("s00", None, None)]),
        (  # heading text: inline source, whitespace folded; slug ASCII, whole words, <= 24 chars
            "## Step 1: Spawn `all` runs (with-skill AND baseline)\n\nx\n\n## Café 🚀\n\nx\n\n## 🚀\n",
            [
                ("s00-step-1-spawn-all-runs", "Step 1: Spawn `all` runs (with-skill AND baseline)", 2),
                ("s01-cafe", "Café 🚀", 2),
                ("s02", "🚀", 2),
            ],
        ),
    ],
)
def test_sections(body, expected):
    text = FM + body
    assert headings(text) == expected
    if expected:
        assert_tiles(text, cut_sections(text), len(FM), len(text))


def test_blank_text_before_the_first_heading_joins_the_first_section():
    text = FM + "\n\n  \n## A\n\na\n\n## B\n"
    sections = cut_sections(text)
    assert [s.unit_id for s in sections] == ["s00-a", "s01-b"]
    assert sections[0].start == len(FM)
    assert sections[0].text == "\n\n  \n## A\n\na\n\n"


def test_preamble_without_front_matter_starts_at_zero():
    text = "Intro\n\n## A\n\n## B\n"
    sections = cut_sections(text)
    assert sections[0].unit_id == "s00" and sections[0].text == "Intro\n\n"
    assert_tiles(text, sections, 0, len(text))


def test_section_outline_lists_only_cutting_headings():
    text = FM + "# T\n\n## A\n\n### deep\n\n## B\n\n- ## listed\n"
    assert section_outline(text) == [("T", 1), ("A", 2), ("B", 2)]


def test_ids_are_deterministic():
    text = FM + "Intro\n\n## Same\n\nx\n\n## Same\n"
    assert [s.unit_id for s in cut_sections(text)] == ["s00", "s01-same", "s02-same"]
    assert cut_sections(text) == cut_sections(text)


# ---------------------------------------------------------------- paragraphs


def paragraphs(text, index):
    section = cut_sections(text)[index]
    units = cut_paragraphs(text, section)
    if units:
        assert_tiles(text, units, units[0].start, section.end)
    return section, units


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # each block runs to the next block's first line, blank lines included;
            # a thematic break closes the unit before it
            "## A\n\nOne.\n\n- x\n- y\n\n```\n# c\n```\n\n> q\n\n---\n\n| a |\n|---|\n| 1 |\n",
            ["One.\n\n", "- x\n- y\n\n", "```\n# c\n```\n\n", "> q\n\n---\n\n", "| a |\n|---|\n| 1 |\n"],
        ),
        (  # a sub-heading goes with the next block that is not a heading
            "## A\n\nOne.\n\n### Sub\n\n#### Subsub\n\nTwo.\n",
            ["One.\n\n", "### Sub\n\n#### Subsub\n\nTwo.\n"],
        ),
        (  # a trailing sub-heading goes with the paragraph before it
            "## A\n\nOne.\n\n### Trailing\n",
            ["One.\n\n### Trailing\n"],
        ),
        (  # ...and is a paragraph of its own when it is the only block
            "## A\n\n### Lonely\n",
            ["### Lonely\n"],
        ),
        (  # adjacent blocks without blank lines still split at each block
            "## A\nline\n- item\n```\ncode\n```\n",
            ["line\n", "- item\n", "```\ncode\n```\n"],
        ),
    ],
)
def test_paragraphs_of_a_section(body, expected):
    text = FM + body + "## B\n\nb\n"
    section, units = paragraphs(text, 0)
    assert [u.text for u in units] == expected
    assert [u.unit_id for u in units] == [f"s00-a-p{i:02d}" for i in range(len(expected))]
    assert all(u.level == "paragraph" and u.section_id == "s00-a" for u in units)


def test_lines_between_heading_and_first_block_are_not_a_unit():
    text = FM + "## A\n\n[ref]: https://example.com\n\nFirst.\n\n## B\n"
    section, units = paragraphs(text, 0)
    assert units[0].text == "First.\n\n"
    assert units[0].start == text.index("First.")


def test_preamble_paragraphs_start_at_its_first_block():
    text = FM + "\nIntro one.\n\nIntro two.\n\n## A\n\n## B\n"
    section, units = paragraphs(text, 0)
    assert section.unit_id == "s00"
    assert [u.unit_id for u in units] == ["s00-p00", "s00-p01"]
    assert units[0].start == text.index("Intro one.")


def test_first_section_with_blank_lead_skips_its_own_heading():
    text = FM + "\n\n## A\n\nOne.\n\n## B\n"
    _, units = paragraphs(text, 0)
    assert [u.text for u in units] == ["One.\n\n"]


def test_paragraphs_with_crlf_keep_crlf():
    text = (FM + "## A\n\nOne.\n\n- x\n\n## B\n").replace("\n", "\r\n")
    _, units = paragraphs(text, 0)
    assert [u.text for u in units] == ["One.\r\n\r\n", "- x\r\n\r\n"]


def test_cut_paragraphs_refuses_a_stale_section():
    text = FM + "## A\n\nOne.\n\n## B\n"
    section = cut_sections(text)[0]
    with pytest.raises(ValueError, match="not a current section"):
        cut_paragraphs(text.replace("One", "Uno"), section)


def test_cut_units():
    text = FM + "## A\n\nOne.\n\nTwo.\n\n## B\n\nb\n"
    assert cut_units(text, "section") == cut_sections(text)
    assert [u.text for u in cut_units(text, "paragraph", "s00-a")] == ["One.\n\n", "Two.\n\n"]
    with pytest.raises(ValueError, match="no section 's09'"):
        cut_units(text, "paragraph", "s09")


# ---------------------------------------------------------------- heading line and body


@pytest.mark.parametrize(
    ("body", "index", "head", "rest"),
    [
        ("## A\n\ntext\n\n## B\n", 0, "## A\n", "\ntext\n\n"),
        ("Title\nline two\n=====\nbody\n\nOther\n=====\n", 0, "Title\nline two\n=====\n", "body\n\n"),
        ("\n\n## A\r\n\r\nx\r\n## B", 1, "## B", ""),
        ("\n\n## A\n\nx\n\n## B\n", 0, "\n\n## A\n", "\nx\n\n"),
        ("Intro\n\n## A\n\n## B\n", 0, "", "Intro\n\n"),
    ],
)
def test_heading_line_and_body(body, index, head, rest):
    text = FM + body
    section = cut_sections(text)[index]
    assert heading_line(section) == head
    assert unit_body(section) == rest
    assert heading_line(section) + unit_body(section) == section.text


def test_paragraph_has_no_heading_line():
    text = FM + "## A\n\n### Sub\n\nx\n\n## B\n"
    para = cut_paragraphs(text, cut_sections(text)[0])[0]
    assert heading_line(para) == ""
    assert unit_body(para) == para.text


def test_heading_line_refuses_a_section_that_does_not_start_with_its_heading():
    broken = Unit(unit_id="s01-a", level="section", heading="A", heading_depth=2, start=0, end=5, text="text\n")
    with pytest.raises(ValueError, match="does not start with its heading"):
        heading_line(broken)
