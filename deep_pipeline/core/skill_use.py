"""Did the agent use the skill?: a signal recorded for people, never a rule.

A judge can only have seen an edit at work if the agent read the skill. Per trace:

**read_skill** — some *agent* step makes a tool call whose arguments (as the agent gave
them, plus every string in them when they are JSON, like `core.evidence.step_full_text`)
name a file of the installed package:

1. a path ending in `<skill name>/<file>` for one of the package's relative file names
   (`cat .claude/skills/demo/SKILL.md`, `sed -n 1,40p skills/demo/SKILL.md`,
   `{"file_path": "/.../work/.claude/skills/demo/notes.txt"}`, `python skills/demo/run.py`);
   every install dir the runners use ends in `.../skill(s)/<name>/`, so any of them counts;
2. or the skill's folder (`skill/<name>` or `skills/<name>`) and, as a word of its own,
   one of the package's file names (`cd skills/demo && cat SKILL.md`).

3. or a call of the agent's own skill tool naming the package: Claude Code's
   `Skill({"skill": "<name>"})` (older versions: `{"command": "<name>"}`), BenchFlow ACP's
   `kind: "skill"` call; the skill's text then arrives injected, no file is opened.
   A plugin's `plugin:<name>` counts too; another skill's name does not.

Listing the folder (`ls skills/demo`) is not reading it. A tool step's output is not
looked at: it shows what came back, not what the agent opened.

**quoted_unit** — some agent step (its text or its tool calls' arguments, as above)
holds a *piece* of the edited unit's new text, whitespace-folded like evidence (§3) and
case-sensitive. The pieces are the unit's lines (list, heading and quote markers
stripped), the sentences of those lines, and the sentences of each block of lines read
as one line (a block ends at a blank line or starts at a heading or list item; so a
wrapped sentence or list item still counts); only pieces of at least
`MIN_QUOTE_CHARS` characters count, since a short run ("the output") matches by chance.
Tool steps do not count here either: the result of `cat SKILL.md` holds the whole unit,
which says the skill was read (above), not that the agent took the unit up.

Runners whose traces show no tool calls — `chat`, `replay`, `command` with `text`
output — cannot show either: both fields are None there ("not applicable"), never False.
mini-swe-agent also has SKILL.md in its system prompt: read_skill says whether it
opened the files as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from deep_pipeline.core.evidence import decoded_strings, fold_whitespace, step_full_text
from pydantic import model_serializer

from deep_pipeline.core.models import SKILL_FILE, Record, Trace
from deep_pipeline.core.pairs import omit_when_none

MIN_QUOTE_CHARS = 30
TOOL_CALL_RUNNERS = ("command", "mini-swe-agent")
SKILL_TOOL = "skill"  # lower-cased: Claude Code's `Skill`, ACP's kind `skill`
NO_READ_WARNING = "no rollout read the skill: the judge cannot have seen it used"

# A file name must stand alone: `SKILL.md` is not `SKILL.md.bak` nor `MYSKILL.md`.
_BEFORE = r"(?<![\w.-])"
_AFTER = r"(?![\w-]|\.\w)"
_MARKERS = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s?)+")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


class SkillUse(Record):
    """One trace's signal; None when its runner's traces cannot show tool calls."""

    trace_id: str
    read_skill: bool | None = None
    quoted_unit: bool | None = None
    # Which package files the agent opened (`opened_files`); None: not shown by the runner, or
    # a record made before it was kept (then not written).
    opened_files: list[str] | None = None

    @model_serializer(mode="wrap")
    def _unknown_files_are_not_written(self, handler):
        return omit_when_none(handler(self), self, ("opened_files",))


class SkillUseShare(Record):
    """How many of an iteration's candidate traces read the skill and quoted the unit."""

    traces: int = 0
    read_skill: int | None = None  # None: not applicable for the runner
    quoted_unit: int | None = None


class IterationSkillUse(SkillUseShare):
    """The share of one iteration, as the report lists it."""

    level: str
    index: int
    # How many candidate rollouts opened each package file, SKILL.md first; written only for a
    # package with other markdown files (SPEC §5's read rule), so single-file reports are as before.
    opened_files: dict[str, int] | None = None

    @model_serializer(mode="wrap")
    def _only_for_a_package(self, handler):
        return omit_when_none(handler(self), self, ("opened_files",))


def opened_counts(uses: list[SkillUse]) -> dict[str, int] | None:
    """How many of the traces opened each package file; None when no trace could show it."""
    known = [set(u.opened_files) for u in uses if u.opened_files is not None]
    if not known:
        return None
    paths = sorted(set().union(*known), key=lambda path: (path != SKILL_FILE, path))
    return {path: sum(path in files for files in known) for path in paths}


def not_applicable_reason(runner: str, output_format: str = "text") -> str | None:
    """Why this runner's traces cannot show the signal, or None when they can."""
    if runner not in TOOL_CALL_RUNNERS:
        return f"{runner} runner shows no tool calls"
    if runner == "command" and output_format == "text":
        return "command runner with text output shows no tool calls"
    return None


def _call_strings(trace: Trace) -> Iterable[str]:
    for step in trace.steps:
        if step.source != "agent":
            continue
        for call in step.tool_calls:
            yield call.arguments
            yield from decoded_strings(call.arguments)


def _skill_tool_calls(trace: Trace) -> Iterable[str]:
    """The arguments of the agent's calls of a skill tool (Claude Code `Skill`, ACP kind `skill`)."""
    for step in trace.steps:
        if step.source == "agent":
            yield from (call.arguments for call in step.tool_calls if call.name.lower() == SKILL_TOOL)


def _names_skill(arguments: str, skill_name: str) -> bool:
    # JSON arguments name it as a value; an ACP title or raw text may say "Skill: <name>".
    strings = decoded_strings(arguments) or [arguments]
    word = re.compile(rf"(?:^|[\s:/\"'])({re.escape(skill_name)})(?:$|[\s\"'])")
    return any(s.strip() == skill_name or word.search(s.strip()) for s in strings)


def _read_patterns(skill_name: str, package_files: list[str]) -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    files = "|".join(re.escape(f) for f in sorted(package_files, key=len, reverse=True)) or r"(?!)"
    name = re.escape(skill_name)
    by_path = re.compile(rf"{_BEFORE}{name}/(?:{files}){_AFTER}")
    folder = re.compile(rf"{_BEFORE}skills?/{name}(?![\w.-])")
    file_word = re.compile(rf"{_BEFORE}(?:{files}){_AFTER}")
    return by_path, folder, file_word


def read_skill(trace: Trace, skill_name: str, package_files: list[str]) -> bool:
    """Whether an agent tool call opens a file of the package or loads it as a skill (module docstring)."""
    if any(_names_skill(args, skill_name) for args in _skill_tool_calls(trace)):
        return True
    by_path, folder, file_word = _read_patterns(skill_name, package_files)
    for text in _call_strings(trace):
        if by_path.search(text) or (folder.search(text) and file_word.search(text)):
            return True
    return False


def opened_files(trace: Trace, skill_name: str, package_files: list[str]) -> list[str]:
    """The package files some agent tool call opens, by the rules of `read_skill` applied per file.

    The agent's skill tool loads SKILL.md's text only: it opens no other file.
    """
    opened = [SKILL_FILE] if any(_names_skill(a, skill_name) for a in _skill_tool_calls(trace)) else []
    texts = list(_call_strings(trace))
    for path in package_files:
        by_path, folder, file_word = _read_patterns(skill_name, [path])
        if path not in opened and any(by_path.search(t) or (folder.search(t) and file_word.search(t)) for t in texts):
            opened.append(path)
    return sorted(opened)


def unread_files(traces: list[Trace], *, skill_name: str, package_files: list[str], unit_files: list[str],
                 applicable: bool = True) -> list[str] | None:
    """The unit files (not SKILL.md) no trace opened; None when the traces cannot show it or all were opened.

    Runners whose traces show no tool calls (`not_applicable_reason`) count every file as possibly
    read; so does a batch none of whose traces holds an agent tool call (imported input traces
    recorded without them): only a trace that shows its calls can show a file was not opened.
    """
    if not applicable or not unit_files or not any(any(_call_strings(t)) for t in traces):
        return None
    opened = {path for trace in traces for path in opened_files(trace, skill_name, package_files)}
    return [path for path in unit_files if path not in opened] or None


def quote_pieces(unit_text: str) -> list[str]:
    """The runs of the unit's text a quote is looked for by (module docstring), in order."""
    lines, blocks = [], [""]
    for raw in unit_text.splitlines():
        line = _MARKERS.sub("", raw)
        if line != raw or not line.strip():  # a heading, list item or blank line starts a new block
            blocks.append("")
        lines.append(line)
        blocks[-1] += " " + line
    pieces: list[str] = []
    for run in [*lines, *blocks]:
        folded = fold_whitespace(run)
        pieces.append(folded)
        pieces.extend(fold_whitespace(part) for part in _SENTENCE_END.split(folded))
    long_enough = (p for p in pieces if len(p) >= MIN_QUOTE_CHARS)
    return list(dict.fromkeys(long_enough))


def quoted_unit(trace: Trace, unit_text: str) -> bool:
    """Whether an agent step holds a piece of the unit's text (module docstring)."""
    pieces = quote_pieces(unit_text)
    if not pieces:
        return False
    for step in trace.steps:
        if step.source == "agent":
            text = fold_whitespace(step_full_text(step))
            if any(piece in text for piece in pieces):
                return True
    return False


def skill_use(trace: Trace, *, skill_name: str, package_files: list[str], unit_text: str,
              applicable: bool = True) -> SkillUse:
    if not applicable:
        return SkillUse(trace_id=trace.trace_id)
    return SkillUse(trace_id=trace.trace_id, read_skill=read_skill(trace, skill_name, package_files),
                    quoted_unit=quoted_unit(trace, unit_text))


def share(uses: list[SkillUse]) -> SkillUseShare:
    """The counts over one batch; not applicable when no trace could show it."""
    if not uses or any(u.read_skill is None for u in uses):
        return SkillUseShare(traces=len(uses))
    return SkillUseShare(traces=len(uses), read_skill=sum(bool(u.read_skill) for u in uses),
                         quoted_unit=sum(bool(u.quoted_unit) for u in uses))


def share_texts(counts: SkillUseShare, not_applicable: str | None = None) -> dict[str, str]:
    """`read_skill`, `quoted_edited_unit` (and a `skill_use_warning`) as people read them."""
    if counts.read_skill is None:
        text = f"n/a ({not_applicable})" if not_applicable else "n/a"
        return {"read_skill": text, "quoted_edited_unit": text}
    texts = {"read_skill": f"{counts.read_skill}/{counts.traces} traces",
             "quoted_edited_unit": f"{counts.quoted_unit}/{counts.traces} traces"}
    if counts.traces and not counts.read_skill:
        texts["skill_use_warning"] = NO_READ_WARNING
    return texts
