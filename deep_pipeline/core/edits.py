"""Local edits: turning what the editor wrote into a checked new unit (SPEC §4 "Local edit rules").

`prepare_edit` repairs what can be repaired without changing the editor's meaning
(line endings, the unit's surrounding blank lines, a repeated heading line) and
rejects the rest with a short sentence that is fed back to the editor model.
`apply_edit` puts a unit's new text into the skill and shifts later offsets.
"""

from __future__ import annotations

from collections import Counter

from markdown_it.rules_core.normalize import NEWLINES_RE

from deep_pipeline.core.models import Record, Unit
from deep_pipeline.core.units import (
    first_heading,
    front_matter_end,
    heading_line,
    section_outline,
    split_depth,
    top_level_headings,
    unit_body,
)

STALE_UNIT = "target unit no longer matches"
_BLANK_CHARS = " \t\r\n"


class EditCheck(Record):
    """The outcome of checking one edit: the unit's new text and the whole new SKILL.md."""

    ok: bool
    reason: str | None = None
    unit_text: str = ""
    skill_text: str = ""


# ---------------------------------------------------------------- applying


def _find(units: list[Unit], unit_id: str) -> Unit | None:
    return next((u for u in units if u.unit_id == unit_id), None)


def apply_edit(skill_text: str, units: list[Unit], unit_id: str, new_unit_text: str) -> tuple[str, list[Unit]]:
    """Replace unit `unit_id`'s text; later units keep their ids and shift by the change in length."""
    target = _find(units, unit_id)
    if target is None:
        raise ValueError(f"unknown unit id {unit_id!r}")
    if skill_text[target.start : target.end] != target.text:
        raise ValueError(f"{unit_id}: {STALE_UNIT}")
    new_skill = skill_text[: target.start] + new_unit_text + skill_text[target.end :]
    return new_skill, replace_unit(units, unit_id, new_unit_text)


def replace_unit(units: list[Unit], unit_id: str, new_unit_text: str) -> list[Unit]:
    """The units after `unit_id` took `new_unit_text`: later units shift, ids stay (SPEC §4)."""
    target = _find(units, unit_id)
    if target is None:
        raise ValueError(f"unknown unit id {unit_id!r}")
    shift = len(new_unit_text) - len(target.text)
    new_units = []
    for unit in units:
        if unit.unit_id == unit_id:
            unit = unit.model_copy(update={"end": unit.start + len(new_unit_text), "text": new_unit_text})
        elif unit.file != target.file:
            pass  # another file of the package: its offsets index its own text
        elif unit.start >= target.end:
            unit = unit.model_copy(update={"start": unit.start + shift, "end": unit.end + shift})
        elif unit.end > target.start:
            raise ValueError(f"{unit.unit_id} overlaps {unit_id}: give units of one level")
        new_units.append(unit)
    return new_units


# ---------------------------------------------------------------- repairing the editor's text


def _line_ending(unit: Unit, skill_text: str) -> str:
    """The unit's own line-ending style, else the file's, else `\\n`."""
    match = NEWLINES_RE.search(unit.text) or NEWLINES_RE.search(skill_text)
    return match.group() if match else "\n"


def _blank_prefix(text: str) -> str:
    """The whole blank lines at the start of `text` (indentation of the first real line stays)."""
    end = 0
    for match in NEWLINES_RE.finditer(text):
        if any(ch not in _BLANK_CHARS for ch in text[end : match.start()]):
            break
        end = match.end()
    return text[:end]


def _trailing_blank(text: str) -> str:
    return text[len(text.rstrip(_BLANK_CHARS)) :]


def _drop_repeated_heading(unit: Unit, body: str) -> str:
    """Editors often repeat the section heading at the top of the body: drop that copy."""
    found = first_heading(body)
    if found and (found[0], found[1]) == (unit.heading, unit.heading_depth):
        return body[found[2] :]
    return body


def _new_unit_text(unit: Unit, skill_text: str, new_text: str) -> str | None:
    """The unit's new text: heading re-attached, surrounding blank lines and line endings kept.

    None when nothing is left to write (e.g. the editor sent only the heading again).
    """
    ending = _line_ending(unit, skill_text)
    new_text = NEWLINES_RE.sub(ending, new_text)
    head = heading_line(unit)
    if head:
        new_text = _drop_repeated_heading(unit, new_text)
        if not head.endswith(("\n", "\r")):
            head += ending  # a heading on the file's last line, now followed by a body
    content = new_text[len(_blank_prefix(new_text)) :].rstrip(_BLANK_CHARS)
    if not content:
        return None
    old_body = unit_body(unit) if head else unit.text
    leading = _blank_prefix(old_body) if old_body.strip(_BLANK_CHARS) else ""
    return head + leading + content + _trailing_blank(unit.text)


# ---------------------------------------------------------------- structural checks


def _describe(heading: tuple[str, int]) -> str:
    return f"'{'#' * heading[1]} {heading[0]}'"


def _added_cutting_heading(old_skill: str, new_skill: str) -> str | None:
    """A reason when the new text adds a heading that would start a section, else None."""
    depth = split_depth(old_skill)

    def cutting(text: str) -> Counter[tuple[str, int]]:
        return Counter(h for h in top_level_headings(text) if depth is None or h[1] <= depth)

    added = list((cutting(new_skill) - cutting(old_skill)).elements())
    if not added:
        return None
    limit = "any top-level heading" if depth is None else f"a heading of depth {depth} or less"
    return (
        f"the edit adds the heading {_describe(added[0])}; in this file {limit} starts a new "
        f"section, so use a deeper heading or bold text instead"
    )


def _structure_problem(old_skill: str, new_skill: str) -> str | None:
    """Why the edited skill breaks the file's structure, or None when it keeps it."""
    old_end = front_matter_end(old_skill)
    try:
        new_end = front_matter_end(new_skill)
    except ValueError:
        new_end = -1
    if new_end != old_end or new_skill[:new_end] != old_skill[:old_end]:
        return "the edit would change the front matter; do not start the text with a '---' line"
    added = _added_cutting_heading(old_skill, new_skill)
    if added:
        return added
    if section_outline(new_skill) != section_outline(old_skill):
        return (
            "the edit changes the list of section headings (an unclosed code fence or HTML block, "
            "or a line that turns text into a heading); keep every other section's heading intact"
        )
    return None


def prepare_edit(skill_text: str, units: list[Unit], unit_id: str, new_text: str) -> EditCheck:
    """Check and complete the editor's `new_text` for unit `unit_id` of the current `skill_text`.

    For a section with a heading, `new_text` is the body only and the heading line is
    re-attached exactly; for a paragraph or the preamble it is the whole unit.
    """
    unit = _find(units, unit_id)
    if unit is None:
        known = ", ".join(u.unit_id for u in units)
        return EditCheck(ok=False, reason=f"unknown unit id {unit_id!r}; the units are: {known}")
    if skill_text[unit.start : unit.end] != unit.text:
        return EditCheck(ok=False, reason=STALE_UNIT)
    unit_text = _new_unit_text(unit, skill_text, new_text)
    if unit_text is None:
        return EditCheck(ok=False, reason="the new text is empty; write the full new text of the unit")
    if unit_text == unit.text:
        # An unchanged unit cannot improve its cell: refuse it before it costs rollouts.
        return EditCheck(ok=False, reason="the new text is identical to the current unit; change what the verdict asks for")
    new_skill, _ = apply_edit(skill_text, units, unit_id, unit_text)
    problem = _structure_problem(skill_text, new_skill)
    return EditCheck(ok=problem is None, reason=problem, unit_text=unit_text, skill_text=new_skill)
