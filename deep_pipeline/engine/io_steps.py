"""The compile's first and last steps: the incumbent's traces, and S_final with the report."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.keys import INPUT_BATCH
from deep_pipeline.core.growth import skill_size
from deep_pipeline.core.models import MACHINE_FAULT_CATEGORIES, Decision, Trace
from deep_pipeline.core.skill_use import IterationSkillUse, opened_counts, share
from deep_pipeline.engine.context import CompileHandle, TrainingTask
from deep_pipeline.engine.live import LIVE, heartbeat
from deep_pipeline.engine.task_rollouts import traces_of_task
from deep_pipeline.engine.records import CompileRecord, Report, RolloutsRecord, TraceBatchRecord
from deep_pipeline.errors import StepError, one_line
from deep_pipeline.core.package import changed_files, file_diffs
from deep_pipeline.store import (
    atomic_copy_tree,
    atomic_write_json,
    package_hash,
    read_model,
    sha256_bytes,
    sha256_text,
)



def agent_name(config: CompileConfig, record: CompileRecord) -> str:
    if config.runner == "command" and config.agent_command:
        from deep_pipeline.rollouts.command import agent_name as command_agent
        from deep_pipeline.rollouts.command import split_template

        return command_agent(split_template(config.agent_command))  # as the runner labels its traces
    if config.runner == "replay":
        return record.bundle_agent or "replay"
    return config.runner


def usable_bundle_traces(record: CompileRecord, traces: list[Trace]) -> bool:
    """Bundle traces are the incumbent's only if made by this agent and model on this SKILL.md (SPEC §2)."""
    if not traces:
        return False
    config = record.config
    for trace in traces:
        if trace.error_category in MACHINE_FAULT_CATEGORIES:
            return False  # not the skill at work (SPEC §9): roll out afresh
        if trace.skill_sha256 != record.skill_sha256:
            return False
        if config.runner == "replay":
            continue
        if (trace.agent or record.bundle_agent) != agent_name(config, record):
            return False
        if (trace.model or record.bundle_agent_model) != config.agent_model:
            return False
    return True


def task_bundle_usable(record: CompileRecord, task: TrainingTask) -> bool:
    """Whether a training task's bundle traces are the incumbent's, as made by the bundle's own agent and model."""
    bundle = task.bundle
    as_recorded = record.model_copy(update={"bundle_agent": bundle.agent, "bundle_agent_model": bundle.agent_model})
    return usable_bundle_traces(as_recorded, bundle.traces)


def input_step(ctx: CompileHandle) -> TraceBatchRecord | None:
    """The incumbent's traces; None when the budget ran out first (the compile then finalizes).

    Per training task (SPEC §11): its bundle's traces when they are the incumbent's (§2),
    else `rollouts` fresh rollouts of S_fast on it.
    """
    cdir = ctx.cdir
    if cdir.has_batch(INPUT_BATCH):
        return cdir.batch(INPUT_BATCH)
    from deep_pipeline.llm.budget import BudgetExhausted

    record = ctx.record
    tasks = ctx.training_tasks
    traces, by_task, sources, notes = [], {}, set(), []
    for task in tasks:
        bundle = task.bundle
        if task_bundle_usable(record, task):
            made = [t.model_copy(update={"batch": INPUT_BATCH} if task.label is None else
                                 {"batch": INPUT_BATCH, "trace_id": f"{task.trace_label(INPUT_BATCH)}-b{n}"})
                    for n, t in enumerate(bundle.traces)]
            sources.add("bundle")
            notes.append("the bundle's traces match this agent, model and SKILL.md")
        else:
            try:
                made = traces_of_task(ctx, task, cdir.input_skill, record.skill_sha256, INPUT_BATCH)
            except BudgetExhausted as exc:
                atomic_write_json(cdir.budget_stop_path, {"step": "input_traces", "reason": str(exc)})
                return None
            sources.add("rollout")
            notes.append(f"{len(bundle.traces)} bundle trace(s) kept in its stored bundle for the record"
                         if bundle.traces else "")
        traces += made
        by_task[task.name] = [t.trace_id for t in made]
    if len(tasks) == 1:
        note = notes[0].replace("in its stored bundle", "in input/bundle.json")
        by_task = None
    else:
        note = "; ".join(f"{task.name}: {n or 'rolled out'}" for task, n in zip(tasks, notes))
    batch = TraceBatchRecord(batch=INPUT_BATCH, trace_ids=[t.trace_id for t in traces], skill_sha256=record.skill_sha256,
                             source="rollout" if "rollout" in sources else "bundle", note=note, task_traces=by_task)
    cdir.require()
    cdir.write_batch(batch, traces)
    return batch


class FinalSkill(NamedTuple):
    status: str  # the compile's end: "completed" or "budget_exhausted"
    folder: Path
    package_hash: str
    skill_sha256: str


def final_skill_step(ctx: CompileHandle) -> FinalSkill:
    """Write S_final: S_fast's package with the current markdown files the decisions edited (SPEC §8)."""
    cdir = ctx.cdir
    if cdir.report_path.is_file():
        report = read_model(cdir.report_path, Report)
        return FinalSkill(report.status, cdir.final_skill, report.final_package_hash, report.final_skill_sha256)
    outlook = ctx.expect("finalize", cdir.key)
    action, state = outlook.action, outlook.state
    final_text = state.current_skill_text
    replace = {"SKILL.md": final_text, **changed_files(state.input_files, state.current_files)}
    atomic_copy_tree(cdir.input_skill, cdir.final_skill, replace={p: t.encode("utf-8") for p, t in replace.items()})
    return FinalSkill(action.status, cdir.final_skill, package_hash(cdir.final_skill), sha256_text(final_text))


def report_step(ctx: CompileHandle) -> Report:
    """Write report.json from the history and the S_final on disk (SPEC §8): the compile's end.

    No fresh rollouts are made for the report.
    """
    cdir = ctx.cdir
    if cdir.report_path.is_file():
        return read_model(cdir.report_path, Report)
    outlook = ctx.expect("finalize", cdir.key)
    history, state, action = outlook.history, outlook.state, outlook.action
    final_sha = sha256_text(state.current_skill_text)
    written = cdir.final_skill / "SKILL.md"
    # Bytes, not read_text: its newline translation turned CRLF and CR into LF (SPEC §4).
    if not written.is_file() or sha256_bytes(written.read_bytes()) != final_sha or not _files_written(cdir, state):
        raise StepError(f"{cdir.final_skill}: S_final is missing or not the current SKILL.md; run final_skill first")
    record = ctx.record
    final_batch = state.current_trace_batch
    final_traces = cdir.batch(final_batch) if final_batch and cdir.has_batch(final_batch) else None
    ran_on_final = final_traces is not None and final_traces.skill_sha256 == final_sha
    by_role, total = cdir.usage_by_role()
    config = record.config
    report = Report(
        compile_key=cdir.key,
        status=action.status,
        input_package_hash=record.package_hash,
        final_package_hash=package_hash(cdir.final_skill),
        final_skill_sha256=final_sha,
        task_name=record.task_name,
        task_prompt=ctx.task_prompt,
        **served_agent(cdir, config, record),
        judge_model=config.judge_model,
        editor_model=config.editor_model,
        levels=state.level_summaries(),
        decisions=[e for e in history.events if isinstance(e, Decision)],
        final_rollouts=final_traces.trace_ids if ran_on_final else [],
        final_rollouts_batch=final_batch if ran_on_final else None,
        skill_use=skill_use_by_iteration(cdir, history.events),
        usage_by_role=by_role,
        usage_total=total,
        final_skill_dir=str(cdir.final_skill),
        skill_size=skill_size(history.skill_text, state.current_skill_text),
        changed_files=file_diffs(state.input_files, changed_files(state.input_files, state.current_files)) or None,
    )
    cdir.require()
    atomic_write_json(cdir.report_path, report)
    return report


def _files_written(cdir, state) -> bool:
    """S_final holds the current text of every other markdown file the decisions edited."""
    changed = changed_files(state.input_files, state.current_files)
    return all((cdir.final_skill / p).is_file() and (cdir.final_skill / p).read_bytes() == t.encode("utf-8")
               for p, t in changed.items())


def served_agent(cdir, config: CompileConfig, record: CompileRecord) -> dict:
    """The report's agent and model: a replay's are the recorded traces' (not the config's default
    model), with a note that the traces were replayed and on which SKILL.md they were made."""
    if config.runner != "replay" or not cdir.has_batch("input"):
        return {"agent": agent_name(config, record), "agent_model": config.agent_model}
    from deep_pipeline.rollouts.replay import recorded_agent, replay_note

    traces = cdir.traces("input")
    agent, model = recorded_agent(traces, record.bundle_agent, record.bundle_agent_model)
    return {"agent": agent, "agent_model": model, "replay": replay_note(traces, record.skill_sha256)}


def skill_use_by_iteration(cdir, events) -> list[IterationSkillUse]:
    """Each rolled-out iteration's share of traces that read the skill (a signal for people, read by no rule).

    Read from rollouts.json for people to see; no decision reads it.
    """
    shares = []
    package = bool(cdir.unit_files())  # a package with markdown files beside SKILL.md
    for decision in (e for e in events if isinstance(e, Decision)):
        path = cdir.iteration_dir(decision.level, decision.index) / "rollouts.json"
        rollouts = read_model(path, RolloutsRecord) if path.is_file() else None
        if rollouts is not None and not rollouts.skipped:
            counts = share(rollouts.skill_use)
            opened = opened_counts(rollouts.skill_use) if package else None
            shares.append(IterationSkillUse(level=decision.level, index=decision.index, opened_files=opened,
                                            **counts.model_dump()))
    return shares


def finalize_step(ctx: CompileHandle) -> Report:
    """S_final, then report.json: the two assets of the finalize job, in one call."""
    final_skill_step(ctx)
    return report_step(ctx)
