"""[evaluation] S_final against S_fast with the task's verifier, per compile (SPEC §10); a task set's
on every task, per task and pooled per split (SPEC §11).

Downstream of `final_skill` and upstream of nothing: its own job (`evaluate`, defs/jobs.py),
never one of the loop's step jobs, and its records (`<compile>/evaluations/<n>/`) are read
by no compile step. Not under the step lock: it writes only its own folder, and a
finalized compile has no step left to race.
"""

from pathlib import Path

import dagster as dg
from pydantic import Field

from deep_pipeline.defs.assets.output import final_skill
from deep_pipeline.defs.metadata import file_ref
from deep_pipeline.defs.partitions import compiles_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.engine.evaluation import DEFAULT_ROLLOUTS, EvaluationResult, format_result
from deep_pipeline.engine.evaluation_tasks import evaluate_compile
from deep_pipeline.rollouts.verifier import DEFAULT_VERIFIER_TIMEOUT_S


class EvaluationConfig(dg.Config):
    verifier: str | None = Field(default=None, description="Command template with {workdir}; default: the "
                                 "task bundle's `verifier` field.")
    rollouts: int = Field(default=DEFAULT_ROLLOUTS, description="Rollouts per side (at least 1).")
    verifier_timeout_s: float = Field(default=DEFAULT_VERIFIER_TIMEOUT_S, description="A verifier still running "
                                      "then is killed with its process group and counts as a fail.")


@dg.asset(
    partitions_def=compiles_partitions,
    group_name="evaluation",
    kinds={"python"},
    pool="llm",
    deps=[final_skill],
    description="S_fast and S_final rolled out N times each with the compile's runner and agent, each rollout "
    "checked by the verifier: pass rates with 95% Wilson intervals, the difference with its 95% Newcombe interval.",
)
def evaluation(context: dg.AssetExecutionContext, config: EvaluationConfig, store: CompileStoreResource) -> dg.MaterializeResult:
    ctx = store.context(context.partition_key)
    result = evaluate_compile(ctx.cdir, verifier=config.verifier, rollouts=config.rollouts,
                      verifier_timeout_s=config.verifier_timeout_s, api_keys=ctx.api_keys, progress=context.log.info)
    context.log.info(format_result(result))
    if not isinstance(result, EvaluationResult):  # a task set's (SPEC §11): per task and pooled per split
        return dg.MaterializeResult(metadata=_task_set_metadata(result))

    def interval(side) -> dg.MetadataValue:
        return dg.MetadataValue.json({"low": side.interval.low, "high": side.interval.high})

    return dg.MaterializeResult(
        metadata={
            "verifier": dg.MetadataValue.text(result.verifier),
            "rollouts_per_side": dg.MetadataValue.int(result.rollouts),
            "fast_passed": dg.MetadataValue.int(result.fast.passed),
            "fast_pass_rate": dg.MetadataValue.float(result.fast.rate),
            "fast_interval_95": interval(result.fast),
            "final_passed": dg.MetadataValue.int(result.final.passed),
            "final_pass_rate": dg.MetadataValue.float(result.final.rate),
            "final_interval_95": interval(result.final),
            "difference": dg.MetadataValue.float(result.difference),
            "difference_interval_95": dg.MetadataValue.json(result.difference_interval.model_dump()),
            "tokens": dg.MetadataValue.int(result.prompt_tokens + result.completion_tokens),
            "cost_usd": (dg.MetadataValue.float(result.cost_usd) if result.cost_usd is not None
                         else dg.MetadataValue.text("unknown")),
            "verifier_signal_used": dg.MetadataValue.bool(False),
            "evaluation_dir": dg.MetadataValue.path(result.folder),
            **file_ref(Path(result.folder) / "results" / f"n{result.rollouts:02d}.json"),
        }
    )


def _task_set_metadata(result) -> dict:
    """A task set's figures: each task's rates and each split's pooled ones, with their intervals."""
    tasks = {t.task: None if t.result is None else {
        "split": t.split, "fast": t.result.fast.rate, "final": t.result.final.rate, "difference": t.result.difference,
        "difference_interval_95": t.result.difference_interval.model_dump()} for t in result.tasks}
    pooled = {p.split: {"fast": p.fast_rate, "final": p.final_rate, "difference": p.difference,
                        "fast_interval_95": p.fast_interval.model_dump(),
                        "final_interval_95": p.final_interval.model_dump(),
                        "difference_interval_95": p.difference_interval.model_dump()} for p in result.pooled}
    return {
        "rollouts_per_side_and_task": dg.MetadataValue.int(result.rollouts),
        "tasks": dg.MetadataValue.json(tasks),
        "pooled": dg.MetadataValue.json(pooled),
        "no_verifier": dg.MetadataValue.json(result.no_verifier),
        "tokens": dg.MetadataValue.int(result.prompt_tokens + result.completion_tokens),
        "cost_usd": (dg.MetadataValue.float(result.cost_usd) if result.cost_usd is not None
                     else dg.MetadataValue.text("unknown")),
        "verifier_signal_used": dg.MetadataValue.bool(False),
        "task_set_result": dg.MetadataValue.path(result.folder),
    }
