"""One compile's folder: where each step's record lives, and the history read back from it.

Nothing but the steps' own outputs is written (DESIGN "The policy and the history"):
the history is rebuilt from the matrix and decision records on every look, so the
files on disk and the compile's state can never disagree.
"""

from __future__ import annotations

from pathlib import Path

from deep_pipeline.core.history import History
from deep_pipeline.core.models import Trace
from deep_pipeline.engine.records import CompileRecord, DecisionRecord, MatrixRecord, TraceBatchRecord, Usage
from deep_pipeline.errors import StepError
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

    @property
    def budget_stop_path(self) -> Path:
        """Written when the input rollouts stop at the budget: the compile then finalizes."""
        return self.path / "budget_exhausted.json"

    @property
    def lock_path(self) -> Path:
        return self.path / "lock"

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

    def bundle(self):
        """The task bundle as registered (its task_dir was resolved into compile.json)."""
        from deep_pipeline.inputs.bundle import validate_bundle
        from deep_pipeline.inputs.jsonfile import load_json_file

        return validate_bundle(load_json_file(self.input_bundle)[1], str(self.input_bundle))

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

    def calls(self) -> list:
        """Every real model call so far (llm/calls.jsonl; a line cut by a crash is skipped)."""
        from deep_pipeline.llm.accounting import read_calls

        return read_calls(self.calls_log)

    def usage_by_role(self) -> tuple[dict[str, Usage], Usage]:
        return totals_by_role(self.calls())

    def usage(self) -> Usage:
        return self.usage_by_role()[1]

    def history(self) -> History:
        """The compile's history: its matrices and decisions in the order they happened."""
        self.require()
        events = [(m.seq, m.matrix) for m in self.matrix_records()]
        events += [(d.seq, d.decision) for d in self.decision_records()]
        events.sort(key=lambda pair: pair[0])
        calls = self.calls()  # read once: both the call count and the spend come from it
        return History(
            skill_text=self.skill_text(),
            input_batch="input" if self.has_batch("input") else None,
            events=[event for _, event in events],
            calls=totals_by_role(calls)[1].calls,
            # What the budget counts: known costs only (an unpriced call adds nothing).
            usd=sum(r.cost_usd or 0.0 for r in calls if not r.cache_hit),
            budget_stop=self.budget_stop_path.is_file(),
            finalized=self.report_path.is_file(),
        )


def totals_by_role(calls: list) -> tuple[dict[str, Usage], Usage]:
    """Model-call totals per role and in all, from the model layer's own accounting."""
    from deep_pipeline.llm.accounting import usage_by_role

    roles = {
        role: Usage.model_validate(totals.model_dump(include=set(Usage.model_fields)))
        for role, totals in usage_by_role(list(calls)).items()
    }
    total = Usage()
    for usage in roles.values():
        total = total.add(usage)
    return roles, total


def usage_of_calls(calls: list) -> Usage:
    """The usage of one step's calls (its CallRecords)."""
    return totals_by_role(calls)[1]
