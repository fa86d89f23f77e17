"""[task steps] A task set's work of one training task (SPEC §11), each a run of its own.

`task_rollouts`: its rollouts of a batch, partition `<compile>/t<i>` (the input batch) or
`<iteration>/t<i>` (the candidate's); `task_columns`: its part of every column of a matrix,
partition `<matrix>/t<i>`. The loop sensor asks for every task's at once, so the daemon runs
them side by side (each its own run, on its own pod under a K8sRunLauncher) and a failed
task's work reruns alone. The step that needs them (input_traces, the matrix, or the iteration
resumed after its candidate) then commits the batch or takes the columns' means. Their lineage
edges (partitions.across_sets) draw the pipeline; which step each served is on its metadata.
"""

import dagster as dg

from deep_pipeline.core.keys import compile_of, parse_key, parse_task_key
from deep_pipeline.defs.metadata import file_ref
from deep_pipeline.defs.partitions import across_sets, task_columns_partitions, task_rollouts_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.core.models import Trace
from deep_pipeline.engine.matrix_steps import MatrixStep, task_columns_step
from deep_pipeline.engine.task_rollouts import task_of, task_record_path, task_rollouts_step
from deep_pipeline.store import read_model
from deep_pipeline.runtime.asset_step import asset_step


def _task_step(partitions_def: dg.DynamicPartitionsDefinition, upstream: str, description: str):
    """The asset of one kind of task step: its own partitions, the `llm` pool, an edge for the lineage."""
    return dg.asset(partitions_def=partitions_def, group_name="task_set", kinds={"python"}, pool="llm",
                    deps=[across_sets(upstream)], description=description)


def _common(ctx, made, owner: str) -> dict:
    return {"compile": dg.MetadataValue.text(ctx.cdir.key), "task": dg.MetadataValue.text(made.task),
            "for_step": dg.MetadataValue.text(owner),
            "budget_exhausted": dg.MetadataValue.bool(made.skipped == "budget_exhausted")}


@_task_step(task_rollouts_partitions, "candidate_package", "One training task's rollouts of a task set's batch "
            "(the input batch or an iteration's candidate), run beside the other tasks' (SPEC §11).")
def task_rollouts(context: dg.AssetExecutionContext, store: CompileStoreResource) -> dg.MaterializeResult:
    owner, _ = parse_task_key(context.partition_key)
    ctx = store.context(compile_of(owner))
    with asset_step(context, ctx, shared=True):
        made = task_rollouts_step(ctx, context.partition_key)
    traces = [read_model(ctx.cdir.batch_dir(made.batch) / f"{tid}.json", Trace) for tid in made.trace_ids]
    return dg.MaterializeResult(metadata={
        **_common(ctx, made, owner),
        "batch": dg.MetadataValue.text(made.batch),
        "traces": dg.MetadataValue.int(len(traces)),
        "timed_out": dg.MetadataValue.int(sum(t.timed_out for t in traces)),
        "errors": dg.MetadataValue.int(sum(t.error_category is not None for t in traces)),
        **file_ref(task_record_path(ctx, made.batch, task_of(ctx, made.label))),
    })


@_task_step(task_columns_partitions, "input_traces", "One training task's part of every column of a task set's "
            "matrix: a judge call per dimension on that task's traces only, run beside the other tasks' (SPEC §11).")
def task_columns(context: dg.AssetExecutionContext, store: CompileStoreResource) -> dg.MaterializeResult:
    owner, label = parse_task_key(context.partition_key)
    _, level, _, index = parse_key(owner)
    ctx = store.context(compile_of(owner))
    with asset_step(context, ctx, shared=True):
        made = task_columns_step(ctx, context.partition_key)
    step, task = MatrixStep(ctx, level, index), task_of(ctx, label)
    scored = [d.name for d in ctx.config.dimensions if step.column_path(d.name, task).is_file()]
    return dg.MaterializeResult(metadata={
        **_common(ctx, made, owner),
        "columns": dg.MetadataValue.text(", ".join(scored) or "-"),
        **file_ref(step.folder / f"task-{label}.json"),
    })
