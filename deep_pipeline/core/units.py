"""Cutting SKILL.md into units: sections, and the paragraphs of one section (SPEC §4).

Structure comes from markdown-it-py's token stream, never from line regexes: a
block's first line is `token.map[0]`, and only blocks at `token.level == 0` count,
so headings inside fences, HTML blocks, block quotes and list items never cut.

`token.map` counts lines after markdown-it has normalized `\\r\\n` and `\\r` to
`\\n`. We map those line numbers back onto the original text with the very same
line model (markdown-it's own `NEWLINES_RE`), so offsets index the text as the user
wrote it, CRLF included. `str.splitlines` would be wrong here: it also breaks on
`\\x0b`, `\\x0c`, `\\x1c`-`\\x1e`, `\\x85`, `\\u2028` and `\\u2029`.

The rules (SPEC §4 as revised in docs/spec-revisions.md, "§4 Units (revised)"):
- Split depth: the shallowest depth that occurs at least twice among the body's
  top-level headings. When that is 1 (some H1 repeats), the body is read as stretches:
  before the first H1 and from each H1 to the next. If some depth d > 1 occurs at least
  twice within one stretch, the split depth is the shallowest such d (H1s and depths
  up to d all cut); otherwise it stays 1. When no depth occurs twice, every top-level
  heading cuts and `split_depth` is None. `split_depth` is the depth an edit may not
  add a heading at (SPEC §4 local edit rules).
- Sections: the body is cut at every top-level heading of depth <= split depth; text
  before the first cut is the preamble when it is not blank (blank text there joins
  the first section).
- Heading-only sections merge: a cut whose text after its heading line(s) is blank
  (spaces, tabs, line endings) or holds only lead-in paragraphs (see below: mcp-builder's
  "## Workflow", "Creating a server involves four main phases:", then "### Phase 1"; the
  lead-in introduces what follows) is merged into the section after it; runs merge the
  same way (`# Title`, `## Part`, then `### Step` with text: one section). The merged
  section carries the LAST heading of the run (its id slug, `heading`, `heading_depth`,
  and its number: ids number the cuts, preamble included, before merging, so a merged
  title's number is skipped and every other section keeps the id it had without the
  rule: `# Demo`, `## When to use` with text gives `s01-when-to-use`, no `s00`)
  and its head (`heading_line`) is everything up to the end of that heading: the
  earlier headings, their lead-ins and the blank lines between them are re-attached
  byte-exact like a heading line. A run that reaches the end of the body stays one section of its own
  (not merged backwards: inside the body of the section before it, an edit of that
  body would drop it). `section_outline` still lists every cutting heading, merged
  ones included, so no edit can delete or alter them.
- Paragraphs of a section: its top-level blocks after the section's head. A unit
  runs from its first block's first line to the next unit's first line (the last one
  to the end of the section). Openers, i.e. sub-headings and lead-ins (a top-level
  paragraph whose text ends with `:`, trailing inline markup such as `**` ignored, a
  trailing code span not counting), join the next block that is not an opener: a run
  `Example:`, `Output:`, fence is one unit, and so is `### Sub`, `Usage:`, list.
  Openers that no other block follows in their section go with the unit before them;
  when the section has no other block, they are one unit. A thematic break (`---`)
  right after a unit goes with that unit; only as a section's first block (or after
  openers) does it start or end a unit like any other block.

Choices the SPEC leaves open:
- Front matter fences may carry trailing spaces or tabs (`--- ` closes like `---`);
  anything else on the line (`----`, `---yaml`) is not a fence.
- A blank body (only spaces, tabs and line endings) has no units at all.
- Link reference definitions make no token: they belong to the block before them,
  or, before a section's first block, to the lines that are not a unit; a section
  whose body is only such definitions is not heading-only.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from deep_pipeline.core.lines import front_matter_end, is_blank, line_starts
from deep_pipeline.core.models import Level, Unit

# CommonMark plus tables: SPEC §4 names tables among the blocks of a paragraph level.
_MD = MarkdownIt("commonmark").enable("table")
_SLUG_MAX = 24


@dataclass(frozen=True)
class _Block:
    """A top-level block of the body: where it starts and, for a heading, what it is."""

    start: int  # offset of the block's first line in the full text
    heading: str | None = None
    depth: int | None = None
    end: int = 0  # offset just after the block's last line (headings and lead-ins)
    lead_in: bool = False  # a paragraph whose text ends with ':'
    rule: bool = False  # a thematic break (`---`, `***`)

    @property
    def opener(self) -> bool:
        """A block that joins the block after it in one paragraph unit."""
        return self.depth is not None or self.lead_in


# ---------------------------------------------------------------- parsing


def _fold(text: str) -> str:
    """Heading text with whitespace runs folded, so a setext heading's lines read as one."""
    return " ".join(text.split())


def _is_lead_in(inline: Token) -> bool:
    """A paragraph's inline content ends with ':' (closing markup skipped, code spans not text)."""
    for child in reversed(inline.children or []):
        blank_text = child.type == "text" and not child.content.strip()
        if child.nesting < 0 or blank_text or child.type in ("softbreak", "hardbreak"):
            continue  # `**Example:**` ends with its text, not with the `**`
        return child.type == "text" and child.content.rstrip().endswith(":")
    return False


def _top_level_blocks(text: str, base: int = 0) -> list[_Block]:
    """Top-level blocks of `text` (a body, or a unit's text), offsets shifted by `base`."""
    starts = line_starts(text)
    tokens = _MD.parse(text)
    blocks = []
    for index, token in enumerate(tokens):
        # Only a block's opening (or self-contained) token at the root starts a block.
        if token.level != 0 or token.nesting < 0 or token.map is None:
            continue
        start = base + starts[token.map[0]]
        end = base + (starts[token.map[1]] if token.map[1] < len(starts) else len(text))
        if token.type == "heading_open":
            blocks.append(_Block(start, _fold(tokens[index + 1].content), int(token.tag[1:]), end))
        else:
            lead_in = token.type == "paragraph_open" and _is_lead_in(tokens[index + 1])
            blocks.append(_Block(start, end=end, lead_in=lead_in, rule=token.type == "hr"))
    return blocks


def _body_blocks(text: str) -> tuple[int, list[_Block]]:
    """The body's start offset and its top-level blocks (front matter is cut off first)."""
    body_start = front_matter_end(text)
    return body_start, _top_level_blocks(text[body_start:], body_start)


def _shallowest_repeated(depths: list[int]) -> int | None:
    repeated = [depth for depth, count in Counter(depths).items() if count >= 2]
    return min(repeated) if repeated else None


def _split_depth(blocks: list[_Block]) -> int | None:
    depths = [block.depth for block in blocks if block.depth is not None]
    depth = _shallowest_repeated(depths)
    if depth != 1:
        return depth
    # Several H1s: cut within them too, at the shallowest depth one H1 stretch repeats.
    stretches: list[list[int]] = [[]]
    for found in depths:
        if found == 1:
            stretches.append([])
        else:
            stretches[-1].append(found)
    inner = [d for d in (_shallowest_repeated(s) for s in stretches) if d is not None]
    return min(inner) if inner else 1


def _cuts(blocks: list[_Block]) -> list[_Block]:
    depth = _split_depth(blocks)
    return [b for b in blocks if b.depth is not None and (depth is None or b.depth <= depth)]


def split_depth(text: str) -> int | None:
    """The deepest heading depth that cuts sections (see the module docstring).

    The shallowest depth occurring at least twice among the body's top-level headings,
    refined below the H1s when that is 1. None when no depth occurs twice: then every
    top-level heading cuts.
    """
    return _split_depth(_body_blocks(text)[1])


def section_outline(text: str) -> list[tuple[str, int]]:
    """(heading, depth) of every cutting heading: what an edit must leave unchanged."""
    return [(b.heading or "", b.depth or 0) for b in _cuts(_body_blocks(text)[1])]


# ---------------------------------------------------------------- sections


def _slug(heading: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    words = "".join(ch if ch.isalnum() else " " for ch in ascii_text.lower()).split()
    slug = words[0][:_SLUG_MAX] if words else ""
    for word in words[1:]:  # whole words only, so ids stay readable
        if len(slug) + 1 + len(word) > _SLUG_MAX:
            break
        slug += "-" + word
    return slug


def _section_id(index: int, heading: str | None) -> str:
    slug = _slug(heading) if heading else ""
    return f"s{index:02d}-{slug}" if slug else f"s{index:02d}"


def _section(text: str, index: int, start: int, end: int, cut: _Block | None) -> Unit:
    return Unit(
        unit_id=_section_id(index, cut.heading if cut else None),
        level="section",
        heading=cut.heading if cut else None,
        heading_depth=cut.depth if cut else None,
        start=start,
        end=end,
        text=text[start:end],
    )


def _only_lead_ins(text: str, blocks: list[_Block], start: int, end: int) -> bool:
    """`text[start:end]` holds nothing but blank lines and lead-in paragraphs (none at all counts)."""
    position = start
    for block in (b for b in blocks if start <= b.start < end):
        if not (block.lead_in and is_blank(text[position : block.start])):
            return False
        position = block.end
    return is_blank(text[position:end])


def _groups(
    text: str, blocks: list[_Block], spans: list[tuple[int, _Block | None]], ends: list[int]
) -> list[tuple[int, int, int]]:
    """(first span, last span, carrying span) of each section once heading-only spans merge."""

    def heading_only(index: int) -> bool:
        # A heading with nothing under it but a lead-in ("four main phases:") introduces
        # the section after it just as a bare heading does.
        cut = spans[index][1]
        return cut is not None and _only_lead_ins(text, blocks, cut.end, ends[index])

    groups: list[tuple[int, int, int]] = []
    first: int | None = None  # first span of a run of heading-only spans
    for index in range(len(spans)):
        first = index if first is None else first
        if not heading_only(index):
            groups.append((first, index, index))
            first = None
    if first is not None:  # the body ends with heading-only spans: they stay one section
        groups.append((first, len(spans) - 1, len(spans) - 1))
    return groups


def cut_sections(text: str) -> list[Unit]:
    """The sections of a full SKILL.md text: they tile `text[front_matter_end(text):]` exactly."""
    body_start, blocks = _body_blocks(text)
    cuts = _cuts(blocks)
    first_cut = cuts[0].start if cuts else len(text)
    # Text before the first cut is a preamble section only when it is not blank.
    preamble = not is_blank(text[body_start:first_cut])
    spans: list[tuple[int, _Block | None]] = [(body_start, None)] if preamble else []
    spans += [(cut.start, cut) for cut in cuts]
    if spans and not preamble:
        spans[0] = (body_start, spans[0][1])  # blank lines before the first heading join it
    ends = [start for start, _ in spans[1:]] + [len(text)]
    return [
        _section(text, carrier, spans[first][0], ends[last], spans[carrier][1])
        for first, last, carrier in _groups(text, blocks, spans, ends)
    ]


# ---------------------------------------------------------------- paragraphs


def _paragraph_starts(blocks: list[_Block]) -> list[int]:
    """Start offsets of paragraph units: a run of openers joins the next other block."""
    starts: list[int] = []
    pending: int | None = None  # start of the openers waiting for their block
    for block in blocks:
        if block.opener:
            pending = block.start if pending is None else pending
            continue
        if block.rule and starts and pending is None:
            continue  # a thematic break closes the unit before it
        starts.append(block.start if pending is None else pending)
        pending = None
    if pending is not None and not starts:
        starts.append(pending)  # the section holds nothing but openers
    return starts


def cut_paragraphs(text: str, section: Unit) -> list[Unit]:
    """The paragraph units of one section of `text`, offsets into the full text."""
    if section.level != "section" or text[section.start : section.end] != section.text:
        raise ValueError(f"{section.unit_id} is not a current section of this text")
    _, blocks = _body_blocks(text)
    # The section's head (its heading, and merged heading-only ones) is not a paragraph.
    body_start = section.start + len(heading_line(section))
    inside = [b for b in blocks if body_start <= b.start < section.end]
    starts = _paragraph_starts(inside)
    ends = starts[1:] + [section.end]
    return [
        Unit(
            unit_id=f"{section.unit_id}-p{i:02d}",
            level="paragraph",
            section_id=section.unit_id,
            start=start,
            end=end,
            text=text[start:end],
        )
        for i, (start, end) in enumerate(zip(starts, ends))
    ]


def cut_units(text: str, level: Level, section_id: str | None = None) -> list[Unit]:
    """Sections of `text`, or the paragraphs of its section `section_id`."""
    sections = cut_sections(text)
    if level == "section":
        return sections
    for section in sections:
        if section.unit_id == section_id:
            return cut_paragraphs(text, section)
    known = ", ".join(s.unit_id for s in sections)
    raise ValueError(f"no section {section_id!r} to cut into paragraphs; sections are: {known}")


# ---------------------------------------------------------------- heading and body


def heading_line(unit: Unit) -> str:
    """A section's head: blank lines before its heading, then its heading line(s).

    The ATX line or the setext pair comes with its line ending. A section merged from
    heading-only ones starts with their headings (and the lead-ins under them): its head
    runs through the last heading of the leading run of headings whose depth is at most
    its own (any deeper heading there is a sub-heading of its body). Empty for the preamble and for paragraphs,
    whose whole text is their body.
    """
    if unit.level != "section" or unit.heading is None:
        return ""
    # A section starts at its head, so parsing it alone finds the same headings.
    head_end = None
    for block in _top_level_blocks(unit.text):
        if block.depth is None and (head_end is not None or not block.lead_in):
            break  # merged heading-only sections may hold lead-ins before the carrying heading
        if block.depth is None:
            continue
        if unit.heading_depth is None or block.depth <= unit.heading_depth:
            head_end = block.end if block.heading == unit.heading else None
    if head_end is None:
        raise ValueError(f"section {unit.unit_id} does not start with its heading")
    return unit.text[:head_end]


def unit_body(unit: Unit) -> str:
    """What the editor is asked to rewrite: the unit's text after its heading line(s)."""
    return unit.text[len(heading_line(unit)) :]


def first_heading(text: str) -> tuple[str, int, int] | None:
    """(heading, depth, end offset) of `text`'s first block when it is a heading, else None.

    Lets the editor's body be checked for a heading it repeated by mistake.
    """
    tokens = _MD.parse(text)
    opening = next((t for t in tokens if t.level == 0 and t.nesting >= 0 and t.map), None)
    if opening is None or opening.type != "heading_open" or opening.map is None:
        return None
    starts = line_starts(text)
    end = starts[opening.map[1]] if opening.map[1] < len(starts) else len(text)
    inline = tokens[tokens.index(opening) + 1]
    return _fold(inline.content), int(opening.tag[1:]), end


def top_level_headings(text: str) -> list[tuple[str, int]]:
    """(heading, depth) of every top-level heading of the body, cutting or not."""
    return [(b.heading or "", b.depth or 0) for b in _body_blocks(text)[1] if b.depth is not None]
