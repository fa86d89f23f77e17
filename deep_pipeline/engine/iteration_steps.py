"""One iteration (SPEC §6) as five steps, each writing its own record in the iteration folder:
edit.json -> candidate/ + candidate.json -> rollouts.json -> comparison.json -> decision.json.

Every step returns its stored record when it exists, so re-running after a crash
repeats nothing finished; the decision, once written, is the commit.
"""

from __future__ import annotations

import shutil
from typing import NamedTuple

from deep_pipeline.core.comparison import summary_comparison
from deep_pipeline.core.decision import decide_tasks, order_seed, rule_regressions
from deep_pipeline.core.edits import prepare_edit
from deep_pipeline.core.growth import growth, too_large
from deep_pipeline.core.keys import batch_name, edit_call_key, iteration_key, matrix_key, parse_key
from deep_pipeline.core.matrix import current_matrix
from deep_pipeline.core.package import changed_files, package_sha256, units_of
from deep_pipeline.core.models import (SKILL_FILE, BUDGET_EXHAUSTED, EDIT_TOO_LARGE, EDIT_VALIDATION_EXHAUSTED,
                                       EXACT_DUPLICATE, CallScores, Cell, Decision, ScoreMatrix, TaskComparison)
from deep_pipeline.core.actions import RunIteration
from deep_pipeline.core.skill_use import SkillUse, not_applicable_reason, opened_files, skill_use
from deep_pipeline.llm.accounting import usage_of_calls
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.task_rollouts import roll_out, tasks_left
from deep_pipeline.engine.live import heartbeat, model_of
from deep_pipeline.engine.records import (CandidateRecord, ComparisonRecord, DecisionRecord, EditAttempt, EditRecord,
                                          MatrixRecord, RolloutsRecord, TaskComparisonEntry, TraceBatchRecord)
from deep_pipeline.errors import AnswerError, StepError
from deep_pipeline.store import atomic_copy_tree, atomic_write_json, package_files, package_hash, read_model, sha256_text

SKIP_REASONS = {
    "exact_duplicate": EXACT_DUPLICATE,
    "edit_validation_exhausted": EDIT_VALIDATION_EXHAUSTED,
    "edit_too_large": EDIT_TOO_LARGE,
    "budget_exhausted": BUDGET_EXHAUSTED,
}


class Iteration:
    """Paths and stored records of one iteration."""

    def __init__(self, ctx: CompileHandle, level: str, index: int):
        self.ctx, self.level, self.index = ctx, level, index
        self.folder = ctx.cdir.iteration_dir(level, index)
        self.key = iteration_key(ctx.cdir.key, level, index)
        self.batch = batch_name(level, index)

    def path(self, name: str):
        return self.folder / name

    def load(self, name: str, model):
        path = self.path(name)
        return read_model(path, model) if path.is_file() else None

    def once(self, name: str, model, compute):
        """The step's stored record, else `compute()` written atomically: the step's commit."""
        stored = self.load(name, model)
        if stored is not None:
            return stored
        record = compute()
        self.ctx.cdir.require()  # a compile folder deleted under the run is not recreated
        atomic_write_json(self.path(name), record)
        return record


def edit_step(it: Iteration) -> EditRecord:
    """Ask the editor for the unit's new text, validated (§4), up to `edit_attempts` tries."""
    ctx = it.ctx
    stored = it.load("edit.json", EditRecord)
    if it.path("decision.json").is_file() and stored is not None:
        return stored
    try:
        outlook = ctx.expect("iteration", it.key)
    except StepError:
        if stored is not None:  # begun before the policy moved on (e.g. to the budget stop): finish it
            return stored
        raise
    history, state, action = outlook.history, outlook.state, outlook.action
    if stored is not None and _still_valid(stored, state):
        return stored
    # A stored edit that no longer validates is regenerated, not trusted (SPEC §9):
    # later attempt numbers make its calls new ones, not cache hits.
    first_attempt = len(stored.attempts) if stored is not None else 0
    if stored is not None:
        _drop_downstream(it)
    with heartbeat(lambda: f"the edit of {it.key} waiting on {model_of(ctx.services.editor)}"):
        record = _write_edit(it, state, action, len(history.events), first_attempt)
    atomic_write_json(it.path("edit.json"), record)
    return record


def _drop_downstream(it: Iteration) -> None:
    """A regenerated edit gets its own candidate, rollouts and comparison, not the stale edit's."""
    for name in ("comparison.json", "rollouts.json", "candidate.json"):
        it.path(name).unlink(missing_ok=True)
    for folder in (it.path("candidate"), it.ctx.cdir.batch_dir(it.batch), it.ctx.cdir.raw_dir(it.batch)):
        shutil.rmtree(folder, ignore_errors=True)


def _still_valid(stored: EditRecord, state) -> bool:
    if stored.status != "ok":
        return stored.base_skill_sha256 == package_sha256(state.current_files)
    check = _prepare(state, stored.unit, stored.edit.new_text)
    return check.ok and _candidate(state, stored.unit, check.skill_text) == (stored.candidate_skill_text,
                                                                              stored.candidate_files)


def _prepare(state, unit, new_text: str):
    """SPEC §4's local edit rules on the unit's own file: its text, outline and front matter."""
    return prepare_edit(state.current_files[unit.file], units_of(state.current_units, unit.file), unit.unit_id, new_text)


def _candidate(state, unit, file_text: str) -> tuple[str, dict[str, str] | None]:
    """The candidate's SKILL.md, and its other markdown files differing from the input (None: none)."""
    files = {**state.current_files, unit.file: file_text}
    return files[SKILL_FILE], changed_files(state.input_files, files) or None


def _write_edit(it: Iteration, state, action: RunIteration, seq: int, first_attempt: int) -> EditRecord:
    from deep_pipeline.llm.budget import BudgetExhausted
    from deep_pipeline.llm.editor import propose_edit

    ctx = it.ctx
    coordinate = action.coordinate
    cell = state.current_matrix.cell(coordinate)
    unit = next(u for u in state.current_units if u.unit_id == coordinate.unit_id)
    base = dict(
        seq=seq, level=it.level, index=it.index, section_id=action.section_id, coordinate=coordinate, cell=cell, unit=unit,
        base_skill_sha256=package_sha256(state.current_files), incumbent_batch=state.current_trace_batch,
        matrix_key=matrix_key(ctx.cdir.key, state.current_matrix.level, state.current_matrix.index),
        unit_text_before=unit.text,
    )
    attempts, failed, calls = [], [], []
    for attempt in range(first_attempt, first_attempt + ctx.config.edit_attempts):
        try:
            edit, made = propose_edit(
                ctx.services.editor,
                step_key=edit_call_key(it.key, attempt),
                task_prompt=ctx.editor_prompt,
                skill_text=state.current_files[unit.file],
                unit=unit,
                cell=cell,
                dimension=ctx.dimension(coordinate.dimension),
                rejections=state.rejections(coordinate),
                failed_checks=list(failed),
            )
        except BudgetExhausted:
            return EditRecord(**base, status="budget_exhausted", attempts=attempts, usage=usage_of_calls(calls))
        except AnswerError as exc:
            # An editor that keeps answering out of shape is a failed attempt (SPEC §4), not a dead compile.
            attempts.append(EditAttempt(attempt=attempt, edit_summary="", new_text="", ok=False, reason=str(exc)))
            failed.append("your last answer was not valid JSON of the requested shape")
            continue
        calls += made
        check = _prepare(state, unit, edit.new_text)
        attempts.append(EditAttempt(attempt=attempt, edit_summary=edit.edit_summary, new_text=edit.new_text, ok=check.ok, reason=check.reason))
        if check.ok:
            edit_sha = sha256_text(check.unit_text)
            status = ("exact_duplicate" if edit_sha in state.rejected_hashes(coordinate) else
                      "edit_too_large" if too_large(unit.text, check.unit_text, ctx.config.max_edit_growth) else "ok")
            skill_text, files = _candidate(state, unit, check.skill_text)
            return EditRecord(
                **base, status=status, attempts=attempts, edit=edit, unit_text_after=check.unit_text,
                candidate_skill_text=skill_text, candidate_files=files, edit_sha256=edit_sha, usage=usage_of_calls(calls),
            )
        failed.append(check.reason)
    return EditRecord(**base, status="edit_validation_exhausted", attempts=attempts, usage=usage_of_calls(calls))


def candidate_step(it: Iteration, edit: EditRecord) -> CandidateRecord:
    """A copy of the current package with that one unit replaced (SPEC §6.3)."""

    def make() -> CandidateRecord:
        if edit.status != "ok":
            return CandidateRecord(skipped=edit.status)
        folder = it.path("candidate")
        # Every file but the markdown files the decisions edited is S_fast's own (SPEC §8): copy from the input.
        replace = {SKILL_FILE: edit.candidate_skill_text, **(edit.candidate_files or {})}
        atomic_copy_tree(it.ctx.cdir.input_skill, folder, replace={p: t.encode("utf-8") for p, t in replace.items()})
        return CandidateRecord(
            package_dir=str(folder), package_hash=package_hash(folder), skill_sha256=sha256_text(edit.candidate_skill_text)
        )

    return it.once("candidate.json", CandidateRecord, make)


def rollouts_step(it: Iteration, candidate: CandidateRecord) -> RolloutsRecord | None:
    """`rollouts` runs of the candidate, concurrently, each with its timeout (SPEC §6.4).

    None while a task set's rollouts are steps of their own still to run (engine/task_rollouts.py):
    the iteration's step ends here and resumes from its records once they ran.
    """
    from deep_pipeline.llm.budget import BudgetExhausted

    ctx = it.ctx
    if not candidate.skipped and not it.path("rollouts.json").is_file() and tasks_left(ctx, it.batch):
        return None

    def make() -> RolloutsRecord:
        if candidate.skipped:
            return RolloutsRecord(skipped=candidate.skipped)
        if not ctx.cdir.has_batch(it.batch):
            try:
                traces, by_task = roll_out(ctx, it.path("candidate"), candidate.skill_sha256, it.batch)
            except BudgetExhausted:
                return RolloutsRecord(skipped="budget_exhausted")
            batch = TraceBatchRecord(batch=it.batch, trace_ids=[t.trace_id for t in traces],
                                     skill_sha256=candidate.skill_sha256, source="rollout", task_traces=by_task)
            ctx.cdir.write_batch(batch, traces)
        traces = ctx.cdir.traces(it.batch)
        return RolloutsRecord(
            batch=it.batch, trace_ids=[t.trace_id for t in traces],
            timed_out=sum(t.timed_out for t in traces), errors=sum(t.error_category is not None for t in traces),
            skill_use=_skill_use(it, traces),
        )

    return it.once("rollouts.json", RolloutsRecord, make)


def _skill_use(it: Iteration, traces: list) -> list[SkillUse]:
    """Per trace, did the agent read the candidate skill and quote the edited unit (a signal, no rule)."""
    cfg, edit = it.ctx.config, it.load("edit.json", EditRecord)
    files = [p.as_posix() for p in package_files(it.path("candidate"))]
    applicable = not_applicable_reason(cfg.runner, cfg.agent_output_format) is None
    name = it.ctx.record.skill_name
    uses = [skill_use(t, skill_name=name, package_files=files,
                      unit_text=(edit.unit_text_after if edit else None) or "", applicable=applicable) for t in traces]
    # Which files each rollout opened (SPEC §5's read rule), where the runner's traces can show it.
    return [u.model_copy(update={"opened_files": opened_files(t, name, files)}) if applicable else u
            for u, t in zip(uses, traces)]


def comparison_step(it: Iteration, edit: EditRecord, rollouts: RolloutsRecord) -> ComparisonRecord:
    """The judge compares incumbent and candidate on the one cell, blind, per training task (SPEC §6.5, §11)."""
    from deep_pipeline.llm.budget import BudgetExhausted

    ctx = it.ctx

    def make() -> ComparisonRecord:
        if rollouts.skipped:
            return ComparisonRecord(skipped=rollouts.skipped)
        incumbent = dict((task.name, traces) for task, traces in ctx.task_traces(edit.incumbent_batch))
        entries, calls = [], []
        try:
            for task, candidate in ctx.task_traces(rollouts.batch):
                comparison, made = _compare_task(it, edit, task, incumbent[task.name], candidate)
                entries.append(TaskComparisonEntry(task=task.name, comparison=comparison,
                                                   rule_regressions=rule_regressions(incumbent[task.name], candidate)))
                calls += made
        except BudgetExhausted:
            return ComparisonRecord(skipped="budget_exhausted")
        one = len(entries) == 1
        return ComparisonRecord(
            comparison=entries[0].comparison if one else summary_comparison({e.task: e.comparison for e in entries}),
            rule_regressions=entries[0].rule_regressions if one else
            [f"{e.task}: {item}" for e in entries for item in e.rule_regressions],
            incumbent_batch=edit.incumbent_batch, candidate_batch=rollouts.batch, usage=usage_of_calls(calls),
            task_comparisons=None if one else entries,
        )

    with heartbeat(lambda: f"the comparison of {it.key} waiting on {_judges(ctx.services)}"):
        return it.once("comparison.json", ComparisonRecord, make)


def _judges(services) -> str:
    """Who a comparison waits on: the judge, or its panel's models (core/panel.py)."""
    return ", ".join(model_of(c) for c in services.panel) if services.panel else model_of(services.judge)


def _compare_task(it: Iteration, edit: EditRecord, task, incumbent: list, candidate: list):
    from deep_pipeline.llm.comparator import compare_cell

    cfg = it.ctx.config
    return compare_cell(
        it.ctx.services.judge, iteration_key=task.call_key(it.key), task_prompt=task.prompt, unit=edit.unit,
        old_text=edit.unit_text_before, new_text=edit.unit_text_after,
        dimension=it.ctx.dimension(edit.coordinate.dimension),
        incumbent_traces=incumbent, candidate_traces=candidate, order_seed=order_seed(it.key),
        orders=cfg.compare_orders, samples=cfg.compare_samples, need_evidence=cfg.regressions_need_evidence,
        parallel=cfg.parallel, max_pairs=cfg.compare_max_pairs, min_gain=cfg.min_gain, panel=it.ctx.services.panel,
    )


class Decided(NamedTuple):
    record: DecisionRecord
    matrix_after: ScoreMatrix | None  # the level's current matrix once this decision counts


def decision_step(it: Iteration, edit: EditRecord, comparison: ComparisonRecord) -> Decided:
    """Apply the decision rule (SPEC §6.6) and record it: the commit (§6.7)."""
    record = it.once("decision.json", DecisionRecord, lambda: _decide(it, edit, comparison))
    return Decided(record, _matrix_after(it, edit, record))


def _matrix_after(it: Iteration, edit: EditRecord, record: DecisionRecord) -> ScoreMatrix | None:
    """The matrix the cell came from with the level's accepted cells up to this decision (SPEC §5)."""
    return level_matrix_at(it.ctx.cdir, edit.matrix_key, record.seq, including=True)


def level_matrix_at(cdir, matrix_key: str | None, seq: int, *, including: bool) -> ScoreMatrix | None:
    """A scored matrix with the level's cells accepted after it and before history position
    `seq` (or up to it, `including`): the matrix as the policy saw it before or after a decision."""
    if matrix_key is None:
        return None
    _, level, _, index = parse_key(matrix_key)
    scored = read_model(cdir.matrix_dir(level, index) / "matrix.json", MatrixRecord)
    accepted = [d.decision for d in cdir.decision_records()
                if d.decision.level == level and scored.seq < d.seq and (d.seq <= seq if including else d.seq < seq)
                and d.decision.accepted]
    return current_matrix(scored.matrix, accepted)


def _decide(it: Iteration, edit: EditRecord, comparison: ComparisonRecord) -> DecisionRecord:
    ctx = it.ctx
    common = dict(
        level=it.level, index=it.index, section_id=edit.section_id, coordinate=edit.coordinate,
        edit_summary=edit.edit.edit_summary if edit.edit else "", edit_sha256=edit.edit_sha256, **_growth(edit),
    )
    if comparison.skipped:
        decision = Decision(**common, accepted=False, reason=SKIP_REASONS[comparison.skipped])
    else:
        result = comparison.comparison
        verdict = decide_tasks(_task_comparisons(ctx, comparison), ctx.config.min_gain, ctx.config.max_task_loss)
        several = comparison.task_comparisons is not None
        decision = Decision(
            **common, accepted=verdict.accepted, reason=verdict.reason, delta=verdict.delta,
            incumbent_score=result.incumbent_score, candidate_score=result.candidate_score,
            candidate_label=result.candidate_label, order_seed=result.order_seed,
            order_disagreement=result.order_disagreement,
            call_scores=[CallScores(candidate_label=c.candidate_label, pair=c.pair, model=c.model, sample=c.sample,
                                    incumbent_score=c.incumbent_score, candidate_score=c.candidate_score)
                         for c in result.calls],
            pairs=result.pairs, gain_bound=result.gain_bound, stop_reason=result.stop_reason,
            pair_reasons=result.pair_reasons,
            task_deltas=verdict.task_deltas if several else None,
            task_regressions=verdict.task_regressions if several else None,
            unverified_regressions=verdict.unverified_regressions or None,
        )
        if verdict.accepted:
            decision = decision.model_copy(update=dict(
                new_text=edit.unit_text_after, skill_text=edit.candidate_skill_text, files=edit.candidate_files,
                trace_batch=comparison.candidate_batch,
                candidate_cell=Cell(
                    unit_id=edit.coordinate.unit_id, dimension=edit.coordinate.dimension, score=result.candidate_score,
                    reason=result.reason, evidence=result.candidate_evidence, dropped_evidence=result.dropped_evidence,
                ),
            ))
    return DecisionRecord(seq=edit.seq, decision=decision, usage=edit.usage.add(comparison.usage))


def _growth(edit: EditRecord) -> dict:
    """The edit's growth of SKILL.md (core/growth.py), when it wrote a valid candidate."""
    if edit.candidate_skill_text is None or edit.unit_text_after is None:
        return {}
    after, start = edit.unit_text_after, edit.unit.start
    candidate = edit.candidate_skill_text if edit.unit.file == SKILL_FILE else (edit.candidate_files or {})[edit.unit.file]
    # The incumbent file: the candidate with the unit's old text back (the unit's offsets are the incumbent's).
    incumbent = candidate[:start] + edit.unit_text_before + candidate[start + len(after):]
    chars, lines = growth(incumbent, candidate)
    return {"growth_chars": chars, "growth_lines": lines}


def _task_comparisons(ctx: CompileHandle, comparison: ComparisonRecord) -> list[TaskComparison]:
    """What the decision rule reads: each training task's comparison and traces (one task: the whole batches)."""
    incumbent = ctx.task_traces(comparison.incumbent_batch)
    candidate = dict((task.name, traces) for task, traces in ctx.task_traces(comparison.candidate_batch))
    if comparison.task_comparisons is None:
        (task, traces), = incumbent
        return [TaskComparison(task="", comparison=comparison.comparison, incumbent_traces=traces,
                               candidate_traces=candidate[task.name])]
    by_task = {entry.task: entry.comparison for entry in comparison.task_comparisons}
    return [TaskComparison(task=task.name, comparison=by_task[task.name], incumbent_traces=traces,
                           candidate_traces=candidate[task.name]) for task, traces in incumbent]


def run_iteration(ctx: CompileHandle, level: str, index: int) -> Decided | None:
    """The iteration's step in this process; None when it ended at its candidate (task rollouts next)."""
    it = Iteration(ctx, level, index)
    edit = edit_step(it)
    candidate = candidate_step(it, edit)
    if (rollouts := rollouts_step(it, candidate)) is None:
        return None
    return decision_step(it, edit, comparison_step(it, edit, rollouts))

