"""[task_rollouts] One training task's rollouts of a task set's batch (SPEC §11), a run of its own.

Partition `<compile>/t<i>` (the input batch) or `<iteration>/t<i>` (the candidate's): the
loop sensor asks for every task's at once, so the daemon runs them side by side (each its own
run, on its own pod under a K8sRunLauncher) and a failed task's rollouts rerun alone. The step
that needs the batch (input_traces, or the iteration resumed after its candidate) commits it.
Its lineage edge from `candidate_package` (partitions.across_sets) draws the pipeline; which
step's batch it adds to is on its metadata.
"""

import dagster as dg

from deep_pipeline.core.keys import parse_task_rollouts_key
from deep_pipeline.defs.metadata import file_ref
from deep_pipeline.defs.partitions import across_sets, task_rollouts_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.core.models import Trace
from deep_pipeline.engine.task_rollouts import task_of, task_record_path, task_rollouts_step
from deep_pipeline.store import read_model
from deep_pipeline.runtime.asset_step import asset_step


@dg.asset(
    partitions_def=task_rollouts_partitions,
    group_name="inputs",
    kinds={"python"},
    pool="llm",
    deps=[across_sets("candidate_package")],
    description="One training task's rollouts of a task set's batch (the input batch or an iteration's "
    "candidate), run beside the other tasks' (SPEC §11).",
)
def task_rollouts(context: dg.AssetExecutionContext, store: CompileStoreResource) -> dg.MaterializeResult:
    owner, _ = parse_task_rollouts_key(context.partition_key)
    ctx = store.context(owner.split("/", 1)[0])
    with asset_step(context, ctx, shared=True):
        made = task_rollouts_step(ctx, context.partition_key)
    traces = [read_model(ctx.cdir.batch_dir(made.batch) / f"{tid}.json", Trace) for tid in made.trace_ids]
    return dg.MaterializeResult(metadata={
        "compile": dg.MetadataValue.text(ctx.cdir.key),
        "task": dg.MetadataValue.text(made.task),
        "for_step": dg.MetadataValue.text(owner),
        "batch": dg.MetadataValue.text(made.batch),
        "traces": dg.MetadataValue.int(len(traces)),
        "timed_out": dg.MetadataValue.int(sum(t.timed_out for t in traces)),
        "errors": dg.MetadataValue.int(sum(t.error_category is not None for t in traces)),
        "budget_exhausted": dg.MetadataValue.bool(made.skipped == "budget_exhausted"),
        **file_ref(task_record_path(ctx, made.batch, task_of(ctx, made.label))),
    })
