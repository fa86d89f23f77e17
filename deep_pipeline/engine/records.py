"""Records the engine writes into the compile store, one per step (SPEC §8, §9).

Core records (ScoreMatrix, Decision, Trace, ...) are wrapped here with what only the
engine knows: the order of events in the history, the model calls a step made, and
the paths behind it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.growth import SkillSize
from deep_pipeline.core.models import Cell, Comparison, Coordinate, Decision, LevelSummary, LocalEdit, ScoreMatrix, Unit
from deep_pipeline.core.pairs import omit_when_none
from deep_pipeline.core.skill_use import IterationSkillUse, SkillUse
from deep_pipeline.llm.accounting import Usage  # the calls' totals each record keeps; owned with the call records


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class EngineRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordedTask(EngineRecord):
    """One task of a compile's task set (SPEC §11), as compile.json keeps it."""

    task: str  # the bundle's task_name
    split: Literal["training", "held_out"]
    bundle_path: str  # the bundle as given, resolved
    bundle_hash: str  # sha256 of the file's bytes
    identity_hash: str | None = None  # what the identity hashes (no verifier); None: not recorded (one task)
    stored: str  # its copy, relative to the compile folder
    task_dir: str | None = None  # the bundle's task_dir, resolved


class CompileRecord(EngineRecord):
    """compile.json: a compile's identity (SPEC §2). Written last when registering.

    Kept small: the task's prompt and traces stay in the stored bundle (input/bundle.json);
    a step reads the prompt from there (CompileHandle.task_prompt).

    `tasks` is the task set (SPEC §11) of a compile of more than one task; a compile of one
    training task, and every compile.json written before task sets, has none (and writes
    none: its compile.json is as it always was); `task_entries` gives its one task.
    """

    key: str
    identity: str
    skill_name: str
    package_hash: str
    skill_sha256: str
    bundle_hash: str
    bundle_path: str
    task_name: str
    task_dir: str | None = None
    bundle_agent: str | None = None
    bundle_agent_model: str | None = None
    config: CompileConfig
    created_at: str = Field(default_factory=now_iso)
    tasks: list[RecordedTask] | None = None

    @property
    def task_entries(self) -> list[RecordedTask]:
        """The compile's tasks: the recorded set, or its one training task."""
        if self.tasks is not None:
            return list(self.tasks)
        return [RecordedTask(task=self.task_name, split="training", bundle_path=self.bundle_path,
                             bundle_hash=self.bundle_hash, stored="input/bundle.json")]

    @model_serializer(mode="wrap")
    def _one_task_writes_no_set(self, handler):
        return omit_when_none(handler(self), self, ("tasks",))

    @model_validator(mode="before")
    @classmethod
    def _drop_embedded_prompt(cls, data):
        # compile.json written before the prompt moved out still loads (the bundle has it).
        if isinstance(data, dict) and "task_prompt" in data:
            data = {k: v for k, v in data.items() if k != "task_prompt"}
        return data


class TraceBatchRecord(EngineRecord):
    """traces/<batch>/batch.json: written after every trace of the batch (the commit)."""

    batch: str
    trace_ids: list[str]
    skill_sha256: str
    source: Literal["bundle", "rollout"]
    note: str = ""
    # A task set's batch (SPEC §11): each training task's trace ids, in the set's order; None
    # (and not written) for a compile of one task, whose batch is all its one task's.
    task_traces: dict[str, list[str]] | None = None

    @model_serializer(mode="wrap")
    def _one_task_writes_no_split(self, handler):
        return omit_when_none(handler(self), self, ("task_traces",))


class TaskRolloutsRecord(EngineRecord):
    """traces/<batch>/task-<t<i>>.json: one training task's rollouts of a task set's batch, made by
    a step of their own (SPEC §11); the batch's step then commits them in batch.json."""

    task: str
    label: str
    batch: str
    trace_ids: list[str] = Field(default_factory=list)
    skipped: str | None = None  # "budget_exhausted": the budget ran out first (its reason in `note`)
    note: str = ""


class TaskColumnsRecord(EngineRecord):
    """matrices/<level>-mNN/task-<t<i>>.json: one training task's part of every column of a task
    set's matrix, scored by a step of its own (SPEC §11); the matrix step then takes the means."""

    task: str
    label: str
    matrix: str  # the matrix key
    skipped: str | None = None  # "budget_exhausted": some of its parts were never scored
    note: str = ""


class ColumnRecord(EngineRecord):
    dimension: str
    cells: list[Cell]
    dropped_evidence: int = 0
    usage: Usage = Field(default_factory=Usage)
    prompt_chars: int = 0
    shared_prefix_chars: int = 0  # chars before the first per-dimension character: same in all columns
    # A task set's column (SPEC §11): `cells` are the means, these every training task's own
    # cells with their evidence; None (and not written) for a compile of one task.
    task_cells: dict[str, list[Cell]] | None = None

    @model_serializer(mode="wrap")
    def _one_task_writes_no_task_cells(self, handler):
        return omit_when_none(handler(self), self, ("task_cells",))

    @property
    def shared_prefix_fraction(self) -> float:
        """How much of the column's prompt a provider's prompt cache can share with the other columns."""
        return self.shared_prefix_chars / self.prompt_chars if self.prompt_chars else 0.0


class MatrixRecord(EngineRecord):
    """matrices/<level>-m<NN>/matrix.json. `seq` orders it in the compile's history."""

    seq: int
    matrix: ScoreMatrix
    reason: Literal["start", "refresh"] = "start"
    usage: Usage = Field(default_factory=Usage)


class EditAttempt(EngineRecord):
    attempt: int
    edit_summary: str
    new_text: str
    ok: bool
    reason: str | None = None


class EditRecord(EngineRecord):
    """iterations/<key>/edit.json: the coordinate chosen and the edit the editor wrote."""

    seq: int
    level: str
    index: int
    section_id: str | None = None
    coordinate: Coordinate
    cell: Cell
    unit: Unit
    base_skill_sha256: str
    incumbent_batch: str
    matrix_key: str | None = None  # the matrix the cell was selected from (None in records before it was kept)
    status: Literal["ok", "edit_validation_exhausted", "exact_duplicate", "edit_too_large", "budget_exhausted"]
    attempts: list[EditAttempt] = Field(default_factory=list)
    edit: LocalEdit | None = None
    unit_text_before: str = ""
    unit_text_after: str | None = None
    candidate_skill_text: str | None = None  # the candidate's SKILL.md (as the incumbent's when another file was edited)
    # The candidate's other markdown files that differ from the input (core/package.py); None: none.
    candidate_files: dict[str, str] | None = None
    edit_sha256: str | None = None
    usage: Usage = Field(default_factory=Usage)

    @model_serializer(mode="wrap")
    def _single_file_writes_as_before(self, handler):
        return omit_when_none(handler(self), self, ("candidate_files",))


class CandidateRecord(EngineRecord):
    skipped: str | None = None
    package_dir: str | None = None
    package_hash: str | None = None
    skill_sha256: str | None = None


class RolloutsRecord(EngineRecord):
    skipped: str | None = None
    batch: str | None = None
    trace_ids: list[str] = Field(default_factory=list)
    timed_out: int = 0
    errors: int = 0
    # Per trace, did the agent read the skill and quote the edited unit (core.skill_use):
    # shown to people, read by no rule. Empty in records made before it was kept.
    skill_use: list[SkillUse] = Field(default_factory=list)


class TaskComparisonEntry(EngineRecord):
    """One training task's comparison in a task set's comparison.json."""

    task: str
    comparison: Comparison
    rule_regressions: list[str] = Field(default_factory=list)


class ComparisonRecord(EngineRecord):
    skipped: str | None = None
    comparison: Comparison | None = None  # the judge's answer: its scores, evidence and regressions
    # The compiler's own regressions (SPEC §6.5: more timeouts than the incumbent), kept
    # apart from the judge's; the decision joins the two.
    rule_regressions: list[str] = Field(default_factory=list)
    incumbent_batch: str | None = None
    candidate_batch: str | None = None
    usage: Usage = Field(default_factory=Usage)
    # A task set's (SPEC §11): each training task's comparison; `comparison` is then their
    # summary (mean scores, every call), read by people and metadata, not by the decision.
    task_comparisons: list[TaskComparisonEntry] | None = None

    @model_serializer(mode="wrap")
    def _one_task_writes_no_task_comparisons(self, handler):
        return omit_when_none(handler(self), self, ("task_comparisons",))


class DecisionRecord(EngineRecord):
    seq: int
    decision: Decision
    usage: Usage = Field(default_factory=Usage)  # the whole iteration's model calls


class Report(EngineRecord):
    """report.json (SPEC §8)."""

    compile_key: str
    status: Literal["completed", "budget_exhausted"]
    input_package_hash: str
    final_package_hash: str
    final_skill_sha256: str
    task_name: str
    task_prompt: str
    agent: str
    agent_model: str
    replay: str | None = None  # runner replay: which traces were replayed, made on which SKILL.md
    judge_model: str
    editor_model: str
    levels: list[LevelSummary]
    decisions: list[Decision]
    final_rollouts: list[str] = Field(default_factory=list)  # trace ids, or empty
    final_rollouts_batch: str | None = None
    # Per iteration that rolled out: how many candidate traces read the skill (a signal, no rule).
    skill_use: list[IterationSkillUse] = Field(default_factory=list)
    usage_by_role: dict[str, Usage] = Field(default_factory=dict)
    usage_total: Usage = Field(default_factory=Usage)
    verifier_signal_used: bool = False
    final_skill_dir: str
    finished_at: str = Field(default_factory=now_iso)
    # S_final's SKILL.md against S_fast's, chars and lines (bloat in sight); None (and not
    # written) in reports made before it was kept.
    skill_size: SkillSize | None = None
    # S_final's markdown files other than SKILL.md that the decisions edited, path -> unified diff
    # from S_fast's (core/package.py); None (not written): no other file was edited, as in a single-file compile.
    changed_files: dict[str, str] | None = None

    @model_serializer(mode="wrap")
    def _older_reports_write_no_size(self, handler):
        return omit_when_none(handler(self), self, ("skill_size", "changed_files"))
