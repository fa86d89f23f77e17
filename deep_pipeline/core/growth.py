"""Bloat in sight: how much an edit grows the file it edits (SKILL.md or a package file), and the `max_edit_growth` rule (SPEC §4, §8).

Sizes are characters (of the decoded text) and lines, counted with markdown-it's line model
(`\\n`, `\\r\\n`, `\\r` each end a line; a last line without an ending counts too), the model
units are cut with, so a CRLF file counts the same lines as its LF twin.

The rule: with `max_edit_growth` set to a factor f (> 1), an edit whose unit's new text is
longer than f × the unit's old text (in characters) is rejected before any rollout as
`edit_too_large`. Unset (None), no edit is refused for its size.
"""

from __future__ import annotations

from markdown_it.rules_core.normalize import NEWLINES_RE

from deep_pipeline.core.models import SKILL_FILE, Record


def line_count(text: str) -> int:
    """Lines of `text`: its line endings, plus one for a last line without an ending."""
    if not text:
        return 0
    endings = len(NEWLINES_RE.findall(text))
    return endings + (0 if NEWLINES_RE.search(text[-1]) else 1)


class SkillSize(Record):
    """S_final's SKILL.md against S_fast's, as the report's head shows them."""

    fast_chars: int
    fast_lines: int
    final_chars: int
    final_lines: int

    @property
    def growth_chars(self) -> int:
        return self.final_chars - self.fast_chars

    @property
    def growth_lines(self) -> int:
        return self.final_lines - self.fast_lines


def skill_size(fast_text: str, final_text: str) -> SkillSize:
    return SkillSize(fast_chars=len(fast_text), fast_lines=line_count(fast_text),
                     final_chars=len(final_text), final_lines=line_count(final_text))


def size_text(size: SkillSize, final: str = "S_final", arrow: str = "→") -> str:
    """A file's size in S_fast against `final` (S_final, or "now" while the compile runs), as people read it."""
    return (f"S_fast {size.fast_chars} chars, {size.fast_lines} lines {arrow} {final} {size.final_chars} chars, "
            f"{size.final_lines} lines ({signed(size.growth_chars)} chars, {signed(size.growth_lines)} lines)")


def growth(incumbent_text: str, candidate_text: str) -> tuple[int, int]:
    """(characters, lines) the candidate file has more than the incumbent's; negative when it shrank."""
    return len(candidate_text) - len(incumbent_text), line_count(candidate_text) - line_count(incumbent_text)


def too_large(old_unit_text: str, new_unit_text: str, max_growth: float | None) -> bool:
    """The `max_edit_growth` rule: the new unit text is longer than max_growth × the old one."""
    return max_growth is not None and len(new_unit_text) > max_growth * len(old_unit_text)


def growth_text(chars: int, lines: int, path: str = SKILL_FILE) -> str:
    """A growth as the status and the report print it, naming the edited file when it is not SKILL.md."""
    where = "" if path == SKILL_FILE else f" in {path}"
    return f"{signed(chars)} chars, {signed(lines)} lines{where}"


def signed(value: int) -> str:
    """A growth as people read it: +12, -3, 0."""
    return f"{value:+d}" if value else "0"
