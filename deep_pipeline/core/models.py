"""The records of a compile (SPEC §2–§7), as pydantic models.

Every record that crosses a boundary (disk, Dagster metadata, a model answer) is one
of these. They are plain data: the rules that act on them live in the sibling modules.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from deep_pipeline.core.pairs import PAIR_FACTS, PairFacts, omit_when_none
from deep_pipeline.core.panel import PanelCall

Level = Literal["section", "paragraph"]
SKILL_FILE = "SKILL.md"
StepSource = Literal["user", "agent", "tool", "system"]
ErrorCategory = Literal["timeout", "idle_timeout", "api_error", "agent_error", "sandbox_setup"]
TIMEOUT_CATEGORIES = ("timeout", "idle_timeout")
# SPEC §9: the machinery failed, not the agent. Such a rollout is not a trace of the skill
# at work: its batch is incomplete and the rollout is run again, never judged.
MACHINE_FAULT_CATEGORIES = ("api_error", "sandbox_setup")

# Decision reasons (SPEC §6.6, §4, §6.2), plus the budget stop (§8).
ACCEPTED = "target_improved_without_runtime_regression"
NOT_RELEVANT = "target_unit_not_task_relevant"
REGRESSED_PREFIX = "runtime_regressed:"
NO_IMPROVEMENT = "target_cell_did_not_improve"
TASK_REGRESSED_PREFIX = "task_regressed:"  # a task set's edit lost too much on one task (SPEC §11)
EXACT_DUPLICATE = "exact_duplicate_rejected_edit"
EDIT_VALIDATION_EXHAUSTED = "edit_validation_exhausted"
EDIT_TOO_LARGE = "edit_too_large"  # the unit grew past `max_edit_growth` (core/growth.py), before any rollout
BUDGET_EXHAUSTED = "budget_exhausted"

# A score on the 1-5 rubric: the judge gives integers; a comparison of several calls
# gives their mean (SPEC §6.5), kept an int when it is one so single-call records stay as they were.
Score = Annotated[int | float, Field(ge=1, le=5)]

# What a runtime regression is (SPEC §6.5).
RegressionKind = Literal["error", "timeout", "failed_command", "wrong_output", "other"]
REGRESSION_KINDS: tuple[str, ...] = ("error", "timeout", "failed_command", "wrong_output", "other")

# Level stop reasons (SPEC §7).
StopReason = Literal[
    "normalized_gap_converged",
    "available_coordinates_exhausted",
    "coordinate_exhausted",
    "max_iterations",
    "max_iterations_after_accept",
    "budget_exhausted",
]


class Record(BaseModel):
    """Base of every record: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Unit(Record):
    """One editable piece of a markdown file of the package: a section or a paragraph of one section.

    `file` is the package path of its file (SKILL.md, or another markdown file: core/package.py);
    `start`/`end` index that file's whole decoded text (front matter included), so
    `file_text[start:end] == text`. `file` is written only when it is not SKILL.md, so
    single-file records read as before.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    unit_id: str
    level: Level
    heading: str | None = None
    heading_depth: int | None = None
    section_id: str | None = None  # the parent section of a paragraph
    start: int
    end: int
    text: str
    file: str = SKILL_FILE

    @model_serializer(mode="wrap")
    def _skill_md_is_not_written(self, handler):
        data = handler(self)
        if isinstance(data, dict) and self.file == SKILL_FILE:
            data.pop("file", None)
        return data


class ToolCall(Record):
    name: str
    arguments: str = ""  # JSON text or the raw command, as the agent gave it
    call_id: str | None = None


class TraceStep(Record):
    step: int = Field(ge=1)
    source: StepSource
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    # A tool step names the call it answers: parallel calls' results arrive in any order,
    # so pairing them by position pairs them wrong.
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False  # the tool reported a failure
    # The model's reasoning (thinking), not a message to anyone: the judge is told which it is.
    reasoning: bool = False


class ModelUsage(Record):
    """One model's share of a rollout (an agent may call sub-models, e.g. to read a web page)."""

    prompt_tokens: int | None = None  # input, cache writes and cache reads together
    completion_tokens: int | None = None
    cost_usd: float | None = None


class ReplayOrigin(Record):
    """A replayed trace's source: a recorded run, made on its own SKILL.md (often not this one)."""

    trace_id: str
    skill_sha256: str | None = None  # the SKILL.md the recorded run was made on; None: not recorded


class Trace(Record):
    """One rollout of an agent on the task with one SKILL.md."""

    # It names a file in the compile store: no separators, no leading dot.
    trace_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    batch: str = "input"
    skill_sha256: str | None = None
    agent: str | None = None
    model: str | None = None
    prompt: str = ""
    steps: list[TraceStep] = Field(default_factory=list)
    final_output: str = ""
    timed_out: bool = False
    error_category: ErrorCategory | None = None
    error_reason: str | None = None
    duration_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    # Per model, when the source records it; the totals above then cover all of them.
    model_usage: dict[str, ModelUsage] = Field(default_factory=dict)
    # Set by the replay runner: the trace was served again, not run on `skill_sha256`.
    replay_of: ReplayOrigin | None = None

    @model_validator(mode="after")
    def _steps_numbered(self) -> "Trace":
        for index, step in enumerate(self.steps, start=1):
            if step.step != index:
                raise ValueError(f"steps must be numbered 1..n in order; step {index} is numbered {step.step}")
        if self.error_category in TIMEOUT_CATEGORIES:
            self.timed_out = True
        return self


class EvidenceRef(Record):
    trace_id: str
    step: int
    quote: str


class Cell(Record):
    unit_id: str
    dimension: str
    score: Score
    reason: str = ""
    evidence: list[EvidenceRef] = Field(default_factory=list)
    dropped_evidence: int = 0

    @property
    def gap(self) -> float:
        """Normalized gap (SPEC §5): 0 for a perfect 5, 1 for a 1."""
        return (5 - self.score) / 4


class TaskSetCell(Record):
    """A level's cell over a task set (SPEC §11): the mean over the training tasks, which
    selection, gaps and open cells read, and every task's own cell with its evidence."""

    cell: Cell
    per_task: dict[str, Cell]  # in the task set's order


class Coordinate(Record):
    model_config = ConfigDict(extra="forbid", frozen=True)

    unit_id: str
    dimension: str

    def __str__(self) -> str:
        return f"{self.unit_id}/{self.dimension}"


class ScoreMatrix(Record):
    """A level's scored matrix: every unit on every dimension (SPEC §5).

    `index` counts matrices within the level (0 = the level's start, later ones are
    refreshes). `units` is the unit list as it was cut when the matrix was scored.
    """

    level: Level
    index: int = 0
    section_id: str | None = None  # set at paragraph level
    dimensions: list[str]
    units: list[Unit]
    cells: list[Cell]
    trace_batch: str  # the traces it was scored on
    skill_sha256: str
    active_dimension: str | None = None  # a paragraph level starts with one
    budget_exhausted: bool = False  # scoring stopped at the budget; cells may be missing
    # Package files (not SKILL.md) of its units that no rollout of `trace_batch` opened (core/skill_use.py):
    # their cells are not selected (core/matrix.py). None (not written): every file was or may have been read.
    unread_files: list[str] | None = None

    @model_serializer(mode="wrap")
    def _all_read_is_not_written(self, handler):
        return omit_when_none(handler(self), self, ("unread_files",))

    def cell(self, coordinate: Coordinate) -> Cell | None:
        for cell in self.cells:
            if cell.unit_id == coordinate.unit_id and cell.dimension == coordinate.dimension:
                return cell
        return None

    def with_cell(self, new: Cell) -> "ScoreMatrix":
        cells = [new if (c.unit_id, c.dimension) == (new.unit_id, new.dimension) else c for c in self.cells]
        return self.model_copy(update={"cells": cells})


class LocalEdit(Record):
    unit_id: str
    dimension: str
    new_text: str
    edit_summary: str = ""


class RegressionClaim(Record):
    """A runtime regression the judge saw with one side, where it saw it (SPEC §6.5).

    `trace_id` is the real trace id (the judge's blind label mapped back); empty when a
    face-value claim (`regressions_need_evidence: false`) named no trace of that side.
    """

    kind: RegressionKind
    trace_id: str = ""
    step: int = Field(default=0, ge=0)
    quote: str = ""
    # False: kept at face value (`regressions_need_evidence: false`) though its quote is not in
    # that step. Written only when false, so records where every claim is verified read as before.
    verified: bool = True

    @model_serializer(mode="wrap")
    def _verified_is_not_written(self, handler):
        data = handler(self)
        if isinstance(data, dict) and self.verified:
            data.pop("verified", None)
        return data


class CompareCall(PanelCall, Record):
    """One judge call of a comparison, mapped back from its blind order; `pair` (core/pairs.py)
    says which pair of a sequential comparison asked it, `model` which panel model answered (core/panel.py)."""

    candidate_label: Literal["A", "B"]  # the order: which side the judge saw the candidate as
    sample: int = 0
    incumbent_score: int = Field(ge=1, le=5)
    candidate_score: int = Field(ge=1, le=5)
    task_relevant: bool
    reason: str = ""  # trace labels already replaced by trace ids
    candidate_evidence: list[EvidenceRef] = Field(default_factory=list)
    incumbent_evidence: list[EvidenceRef] = Field(default_factory=list)
    dropped_evidence: int = 0
    # Kept: valid claims (or every claim when regressions need no evidence); dropped: counted.
    candidate_regressions: list[RegressionClaim] = Field(default_factory=list)
    incumbent_regressions: list[RegressionClaim] = Field(default_factory=list)
    dropped_regressions: int = 0

    @property
    def delta(self) -> int:
        return self.candidate_score - self.incumbent_score


class Comparison(PairFacts, Record):
    """The judge's verdict on one cell over all its calls (SPEC §6.5), mapped back from A/B; with
    more than one pair, the pairs asked, their bound and why they stopped (core/pairs.py)."""

    incumbent_score: Score  # the mean over `calls`
    candidate_score: Score
    task_relevant: bool  # false only when every call says so
    runtime_regressions: list[str] = Field(default_factory=list)  # the candidate's, one readable item each
    regressions: list[RegressionClaim] = Field(default_factory=list)  # the same, as claims
    dropped_regressions: int = 0
    candidate_evidence: list[EvidenceRef] = Field(default_factory=list)
    dropped_evidence: int = 0
    reason: str = ""
    candidate_label: Literal["A", "B"] = "B"  # the seeded order: the first call's
    order_seed: int = 0
    calls: list[CompareCall] = Field(default_factory=list)
    order_disagreement: bool | None = None  # None: one order only


class TaskComparison(Record):
    """One training task's comparison and the traces it was made on (SPEC §11): what the
    decision rule reads per task. A compile of one task has exactly one."""

    task: str
    comparison: Comparison
    incumbent_traces: list[Trace] = Field(default_factory=list)
    candidate_traces: list[Trace] = Field(default_factory=list)


class TaskDecision(Record):
    """The decision rule's verdict over every training task (SPEC §6.6, §11)."""

    accepted: bool
    reason: str
    delta: float  # the mean of the per-task deltas
    task_deltas: dict[str, float]  # every task's delta, in the task set's order
    task_regressions: dict[str, list[str]] = Field(default_factory=dict)  # tasks with any, their items
    unverified_regressions: list[str] = Field(default_factory=list)  # the items kept at face value


class CallScores(PanelCall, Record):
    """One comparison call's scores, as a decision records them (`model`: a panel's, core/panel.py)."""

    candidate_label: Literal["A", "B"]
    sample: int = 0
    incumbent_score: int
    candidate_score: int


class Rejection(Record):
    """Feedback the editor gets for a coordinate (SPEC §6.1, §6.7)."""

    unit_id: str
    dimension: str
    edit_summary: str
    score_change: str  # e.g. "3 -> 3"
    reason: str
    text_sha256: str | None = None


class Decision(PairFacts, Record):
    """One iteration's outcome. Recording it is the commit (SPEC §6.7). Its comparison's pair facts
    (core/pairs.py) when it asked more than one pair."""

    level: Level
    index: int  # iteration number within the level (0-based)
    section_id: str | None = None
    coordinate: Coordinate
    accepted: bool
    reason: str
    delta: float | None = None
    incumbent_score: Score | None = None
    candidate_score: Score | None = None
    edit_summary: str = ""
    edit_sha256: str | None = None  # hash of the unit's new text
    candidate_label: Literal["A", "B"] | None = None
    order_seed: int | None = None
    call_scores: list[CallScores] = Field(default_factory=list)
    order_disagreement: bool | None = None
    # On accept: what the current package, traces and cell become.
    new_text: str | None = None
    skill_text: str | None = None
    # The package's other markdown files whose text then differs from the input (core/package.py),
    # path -> text; None (and not written) when none does, as in every single-file compile.
    files: dict[str, str] | None = None
    trace_batch: str | None = None
    candidate_cell: Cell | None = None
    # A task set's (SPEC §11): every training task's delta and its regressions; None (and
    # not written) for a compile of one task.
    task_deltas: dict[str, float] | None = None
    task_regressions: dict[str, list[str]] | None = None
    # The edit's growth of SKILL.md, candidate minus incumbent (core/growth.py); None (and not
    # written) when there was no valid edit, or in records made before it was kept.
    growth_chars: int | None = None
    growth_lines: int | None = None
    # The regression items (as in `reason` / `task_regressions`) the judge claimed without a quote
    # the traces bear out, kept at face value (`regressions_need_evidence: false`); None: none.
    unverified_regressions: list[str] | None = None

    @model_serializer(mode="wrap")
    def _one_task_writes_no_task_fields(self, handler):
        return omit_when_none(handler(self), self, OPTIONAL_DECISION_FIELDS)


OPTIONAL_DECISION_FIELDS = ("files", "task_deltas", "task_regressions", "growth_chars", "growth_lines", "unverified_regressions",
                            *PAIR_FACTS)


class LevelSummary(Record):
    level: Level
    section_id: str | None = None
    stop_reason: StopReason | None = None
    iterations: int = 0
    accepted: int = 0
    matrices: int = 0
