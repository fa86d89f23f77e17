"""Properties of units and edits over generated markdown documents (SPEC §4).

Two generators: a *clean* one whose blocks are separated by blank lines, so the
top-level headings are known in advance and serve as an oracle for the sections;
and a *messy* one whose blocks may touch (setext underlines, lazy lines, unclosed
fences), where only the invariants are checked.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from deep_pipeline.core.edits import prepare_edit
from deep_pipeline.core.units import (
    cut_paragraphs,
    cut_sections,
    front_matter_end,
    heading_line,
    section_outline,
    split_depth,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FRONT_MATTER = ["---", "name: demo", "description: generated", "---"]
# Words that never start a block: they keep the clean generator's oracle exact.
WORD = st.sampled_from(["alpha", "beta", "run it", "`code`", "*em*", "x\u2028y", "tab\tbed", "ünï"])
ENDING = st.sampled_from(["\n", "\r\n", "\r"])
Block = tuple[list[str], "tuple[str, int] | None"]  # lines, and the heading it is (if one)


@st.composite
def heading_block(draw) -> Block:
    title = draw(st.sampled_from(["Setup", "Usage", "Notes", "Step one", "Überblick"]))
    depth = draw(st.integers(1, 4))
    if depth <= 2 and draw(st.booleans()):
        return [title, ("=" if depth == 1 else "-") * draw(st.integers(1, 6))], (title, depth)
    return [f"{'#' * depth} {title}"], (title, depth)


def _plain_block():
    paragraph = st.lists(WORD, min_size=1, max_size=3)
    return st.one_of(
        paragraph,
        st.lists(st.sampled_from(["- item", "- ## listed heading", "1. # numbered heading"]), min_size=1, max_size=3),
        st.lists(st.sampled_from(["# fenced", "## fenced", "---", "===", "text"]), max_size=4).map(
            lambda body: ["```"] + body + ["```"]
        ),
        st.just(["> # quoted heading", "> quoted text"]),
        st.just(["<div>", "## inside html", "</div>"]),
        st.just(["    # indented code"]),
        st.just(["| a | b |", "|---|---|", "| 1 | 2 |"]),
        st.sampled_from([["***"], ["___"]]),
    ).map(lambda lines: (lines, None))


BLOCK = st.one_of(heading_block(), heading_block(), _plain_block())


def _join(draw, lines: list[str]) -> str:
    """Join lines with one ending, or a mix of all three, and maybe a final line break."""
    if draw(st.booleans()):
        ending = draw(ENDING)
        breaks = [ending] * len(lines)
    else:
        breaks = [draw(ENDING) for _ in lines]
        for i in range(1, len(lines)):
            # "\r" then an empty line ended by "\n" would read as one CRLF, losing the blank line.
            if breaks[i - 1] == "\r" and not lines[i] and breaks[i] == "\n":
                breaks[i] = "\r"
    if not draw(st.booleans()):
        breaks[-1] = ""
    return "".join(line + brk for line, brk in zip(lines, breaks))


@st.composite
def clean_document(draw):
    blocks = draw(st.lists(BLOCK, min_size=1, max_size=8))
    lines = list(FRONT_MATTER) if draw(st.booleans()) else []
    lines += [""] * draw(st.integers(0, 2))
    for block_lines, _ in blocks:
        lines += block_lines + [""] * draw(st.integers(1, 2))
    return _join(draw, lines), [h for _, h in blocks]


@st.composite
def messy_document(draw):
    pieces = draw(
        st.lists(
            st.one_of(BLOCK.map(lambda b: b[0]), st.lists(st.sampled_from(["```", "", "---", "#", "=", " "]), max_size=2)),
            min_size=1,
            max_size=10,
        )
    )
    lines = list(FRONT_MATTER) if draw(st.booleans()) else []
    for piece in pieces:
        lines += piece + [""] * draw(st.integers(0, 1))
    assume(lines)
    text = _join(draw, lines)
    try:
        front_matter_end(text)
    except ValueError:
        assume(False)  # an unclosed front matter is refused before cutting
    return text


def assert_tiling(text: str) -> None:
    body_start = front_matter_end(text)
    sections = cut_sections(text)
    if not sections:
        assert text[body_start:].strip(" \t\r\n") == ""
        return
    assert sections[0].start == body_start and sections[-1].end == len(text)
    ids = [s.unit_id for s in sections]
    assert len(set(ids)) == len(ids)
    numbers = [int(section.unit_id[1:3]) for section in sections]
    assert numbers == sorted(set(numbers))  # in document order; a merged title's number is skipped
    for index, section in enumerate(sections):
        assert text[section.start : section.end] == section.text
        assert index == 0 or section.start == sections[index - 1].end
        paragraphs = cut_paragraphs(text, section)
        for before, after in zip(paragraphs, paragraphs[1:]):
            assert before.end == after.start
        for paragraph in paragraphs:
            assert text[paragraph.start : paragraph.end] == paragraph.text
            assert paragraph.section_id == section.unit_id
        if paragraphs:
            assert paragraphs[-1].end == section.end
            assert paragraphs[0].start >= section.start + len(heading_line(section))


def _expected_split(headings: list[tuple[str, int]]) -> int | None:
    """The oracle's split depth: shallowest repeated depth, refined within H1 stretches."""

    def shallowest_repeated(depths):
        repeated = [d for d, count in Counter(depths).items() if count >= 2]
        return min(repeated) if repeated else None

    split = shallowest_repeated([d for _, d in headings])
    if split != 1:
        return split
    stretches, current = [], []
    for _, depth in headings:
        if depth == 1:
            stretches.append(current)
            current = []
        else:
            current.append(depth)
    inner = [d for d in map(shallowest_repeated, stretches + [current]) if d is not None]
    return min(inner) if inner else 1


@SETTINGS
@given(clean_document())
def test_sections_follow_the_top_level_headings(doc):
    text, blocks = doc
    headings = [h for h in blocks if h is not None]
    split = _expected_split(headings)
    cuts = [i for i, h in enumerate(blocks) if h is not None and (split is None or h[1] <= split)]
    # A cut followed by another cut has nothing under it: it merges into the next section,
    # which carries the later heading; a run at the very end is carried by its last cut.
    carriers = [blocks[i] for i in cuts if i + 1 == len(blocks) or i + 1 not in cuts]
    assert split_depth(text) == split
    assert section_outline(text) == [blocks[i] for i in cuts]
    assert [(s.heading, s.heading_depth) for s in cut_sections(text) if s.heading is not None] == carriers
    assert_tiling(text)


@SETTINGS
@given(messy_document())
def test_units_always_tile(text):
    assert_tiling(text)
    assert cut_sections(text) == cut_sections(text)


NEW_LINE = st.sampled_from(
    ["plain words", "## Added", "# Added", "### Added", "Added", "===", "---", "```", "> ## quoted", "- # listed", "", "    # code"]
)


@st.composite
def doc_and_unit(draw):
    text = draw(st.one_of(clean_document().map(lambda d: d[0]), messy_document()))
    sections = cut_sections(text)
    assume(sections)
    section = draw(st.sampled_from(sections))
    units = sections
    if draw(st.booleans()):
        units = cut_paragraphs(text, section)
        assume(units)
    return text, units, draw(st.sampled_from(units))


@SETTINGS
@given(doc_and_unit(), st.lists(NEW_LINE, min_size=1, max_size=6), ENDING)
def test_accepted_edits_keep_outline_and_front_matter(target, new_lines, ending):
    text, units, unit = target
    check = prepare_edit(text, units, unit.unit_id, ending.join(new_lines))
    event("accepted" if check.ok else f"rejected: {check.reason[:40]}")
    if not check.ok:
        assert check.reason
        return
    body_start = front_matter_end(text)
    assert front_matter_end(check.skill_text) == body_start
    assert check.skill_text[:body_start] == text[:body_start]
    assert section_outline(check.skill_text) == section_outline(text)
    # Only the unit changed, and a section kept its heading line exactly.
    assert check.skill_text[: unit.start] == text[: unit.start]
    assert check.skill_text[unit.start :].removeprefix(check.unit_text) == text[unit.end :]
    assert check.unit_text.startswith(heading_line(unit))


@SETTINGS
@given(doc_and_unit(), st.integers(1, 4), ENDING)
def test_adding_a_cutting_heading_is_always_rejected(target, depth, ending):
    text, units, unit = target
    split = split_depth(text)
    assume(split is None or depth <= split)
    new_text = ending.join(["plain words", "", f"{'#' * depth} Added", "", "more words"])
    check = prepare_edit(text, units, unit.unit_id, new_text)
    assert not check.ok
