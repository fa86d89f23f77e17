"""One compile's folder: where each step's record lives, and the history read back from it.

Nothing but the steps' own outputs is written (DESIGN "The policy and the history"):
the history is rebuilt from the matrix and decision records on every look, so the
files on disk and the compile's state can never disagree.
"""

from __future__ import annotations

from pathlib import Path

from deep_pipeline.core.history import History
from deep_pipeline.core.models import Trace
from deep_pipeline.engine.records import CompileRecord, DecisionRecord, MatrixRecord, TraceBatchRecord
from deep_pipeline.errors import StepError
from deep_pipeline.llm.accounting import CallRecord, Usage, read_calls, spent, usage_by_role, usage_of_calls
from deep_pipeline.store import atomic_write_json, read_model


class CompileDir:
    def __init__(self, root: Path, key: str):
        self.root = Path(root)
        self.key = key
        self.path = self.root / key

    # -- paths -------------------------------------------------------------------------
    @property
    def record_path(self) -> Path:
        return self.path / "compile.json"

    @property
    def input_skill(self) -> Path:
        return self.path / "input" / "skill"

    @property
    def input_bundle(self) -> Path:
        return self.path / "input" / "bundle.json"

    @property
    def llm_cache(self) -> Path:
        return self.path / "llm" / "cache"

    @property
    def calls_log(self) -> Path:
        return self.path / "llm" / "calls.jsonl"

    @property
    def final_skill(self) -> Path:
        return self.path / "final" / "skill"

    @property
    def report_path(self) -> Path:
        return self.path / "report.json"

    # Written after the compile and read by no step of it (SPEC §10): the HTML page, evaluate's records.
    @property
    def html_report_path(self) -> Path:
        return self.path / "report.html"

    @property
    def evaluations_dir(self) -> Path:
        return self.path / "evaluations"

    @property
    def budget_stop_path(self) -> Path:
        """Written when the input rollouts stop at the budget: the compile then finalizes."""
        return self.path / "budget_exhausted.json"

    @property
    def lock_path(self) -> Path:
        return self.path / "lock"

    @property
    def agents_dir(self) -> Path:
        """Records of the agents a subprocess runner has running, for the next opener to stop if it died."""
        return self.path / "agents"

    def batch_dir(self, batch: str) -> Path:
        return self.path / "traces" / batch

    def raw_dir(self, batch: str) -> Path:
        return self.path / "raw" / batch

    def matrix_dir(self, level: str, index: int) -> Path:
        return self.path / "matrices" / f"{level}-m{index:02d}"

    def iteration_dir(self, level: str, index: int) -> Path:
        return self.path / "iterations" / f"{level}-i{index:02d}"

    # -- records -----------------------------------------------------------------------
    def exists(self) -> bool:
        return self.record_path.is_file()

    def require(self) -> None:
        """A compile folder deleted under a running compile fails the step clearly."""
        if not self.exists():
            raise StepError(f"{self.path}: compile folder is missing or incomplete (no compile.json)")

    def record(self) -> CompileRecord:
        self.require()
        return read_model(self.record_path, CompileRecord)

    def skill_text(self) -> str:
        return (self.input_skill / "SKILL.md").read_bytes().decode("utf-8")

    def unit_files(self, skill_text: str | None = None) -> dict[str, str]:
        """S_fast's other markdown files that are units (core/package.py), path -> text."""
        from deep_pipeline.inputs.skill import read_unit_files

        return read_unit_files(self.input_skill, self.skill_text() if skill_text is None else skill_text)

    def bundle(self, stored: str | None = None):
        """The task bundle as registered (its task_dir was resolved into compile.json); `stored`:
        another task's copy, relative to the folder (compile.json's `tasks`)."""
        from deep_pipeline.inputs.bundle import validate_bundle
        from deep_pipeline.inputs.jsonfile import load_json_file

        path = self.input_bundle if stored is None else self.path / stored
        return validate_bundle(load_json_file(path)[1], str(path))

    def has_batch(self, batch: str) -> bool:
        return (self.batch_dir(batch) / "batch.json").is_file()

    def write_batch(self, record: TraceBatchRecord, traces: list[Trace]) -> None:
        folder = self.batch_dir(record.batch)
        for trace in traces:
            atomic_write_json(folder / f"{trace.trace_id}.json", trace)
        atomic_write_json(folder / "batch.json", record)  # last: the batch's commit

    def batch(self, batch: str) -> TraceBatchRecord:
        return read_model(self.batch_dir(batch) / "batch.json", TraceBatchRecord)

    def traces(self, batch: str) -> list[Trace]:
        record = self.batch(batch)
        return [read_model(self.batch_dir(batch) / f"{tid}.json", Trace) for tid in record.trace_ids]

    def matrix_records(self) -> list[MatrixRecord]:
        files = sorted((self.path / "matrices").glob("*/matrix.json"))
        return [read_model(f, MatrixRecord) for f in files]

    def decision_records(self) -> list[DecisionRecord]:
        files = sorted((self.path / "iterations").glob("*/decision.json"))
        return [read_model(f, DecisionRecord) for f in files]

    def calls(self) -> list[CallRecord]:
        """Every real model call so far (llm/calls.jsonl; a line cut by a crash is skipped)."""
        return read_calls(self.calls_log)

    def usage_by_role(self) -> tuple[dict[str, Usage], Usage]:
        calls = self.calls()
        return usage_by_role(calls), usage_of_calls(calls)

    def usage(self) -> Usage:
        return usage_of_calls(self.calls())

    def history(self) -> History:
        """The compile's history: its matrices and decisions in the order they happened."""
        self.require()
        events = [(m.seq, m.matrix) for m in self.matrix_records()]
        events += [(d.seq, d.decision) for d in self.decision_records()]
        events.sort(key=lambda pair: pair[0])
        calls, usd = spent(self.calls())  # what the budget counts, by the budget's own rule
        skill_text = self.skill_text()
        return History(
            skill_text=skill_text,
            files=self.unit_files(skill_text),
            input_batch="input" if self.has_batch("input") else None,
            events=[event for _, event in events],
            calls=calls,
            usd=usd,
            budget_stop=self.budget_stop_path.is_file(),
            finalized=self.report_path.is_file(),
        )

