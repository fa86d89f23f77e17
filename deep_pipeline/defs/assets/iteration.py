"""[iteration] candidate_edit -> candidate_package -> candidate_rollouts -> comparison -> decision.

One `@multi_asset` step, as `matrix_columns` is: one op runs the iteration's five engine
steps in order under one step lock and one wrapper, and yields each asset the moment its
step is done, so a crash repeats only what is not stored yet (the engine's records say
which). All five materialize on every iteration, short-circuited ones included (their
metadata says `skipped: ...`), so `decision` always exists. A task set's iteration (SPEC §11)
takes two runs: the first ends at `candidate_package`, each training task's rollouts run as
`task_rollouts` runs of their own, and the second (resumed from the records) yields all five. Dagster cannot map one dynamic
partition set onto another: `candidate_edit`'s edge from `level_matrix`
(partitions.across_sets) draws the lineage and loads nothing, and which matrix an iteration
selected from (recorded in edit.json), the incumbent's traces and the compile are metadata
(defs/iteration_meta.py).
"""


import dagster as dg

from deep_pipeline.core.keys import parse_key
from deep_pipeline.defs.iteration_meta import comparison_meta, decision_meta, edit_meta, package_meta, rollouts_meta
from deep_pipeline.defs.partitions import across_sets, iterations_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.engine import iteration_steps as steps
from deep_pipeline.runtime.asset_step import asset_step

# (asset, what it is): in the order the step materializes them, each depending on the one before.
ASSETS = [
    ("candidate_edit", "The editor's local edit of the selected unit, validated (SPEC §4, §6.1-2)."),
    ("candidate_package", "The current package with that one unit replaced (SPEC §6.3)."),
    ("candidate_rollouts", "The candidate's rollouts, concurrently, each with a timeout (SPEC §6.4)."),
    ("comparison", "The judge's blind A/B comparison of the one cell (SPEC §6.5)."),
    ("decision", "The iteration's decision (SPEC §6.6); recording it is the commit (§6.7). Its page stands "
     "alone: diff, scores, the judge's reason, evidence in its trace steps, the cell that selected the unit, "
     "the matrix before and after, links to the records."),
]
ASSET_NAMES = [name for name, _ in ASSETS]

SPECS = [
    # Skippable past the candidate: a task set's iteration ends its first run there and its task
    # rollouts run as runs of their own (defs/assets/task_steps.py); a second run finishes it.
    dg.AssetSpec(name, group_name="iteration", kinds={"python"}, description=description, skippable=i >= 2,
                 deps=[across_sets("level_matrix")] if i == 0 else [ASSETS[i - 1][0]])
    for i, (name, description) in enumerate(ASSETS)
]


def _iteration(store: CompileStoreResource, partition_key: str) -> steps.Iteration:
    compile_key, level, _, index = parse_key(partition_key)
    return steps.Iteration(store.context(compile_key), level, index)


@dg.multi_asset(specs=SPECS, name="iteration", partitions_def=iterations_partitions, pool="llm")
def iteration(context: dg.AssetExecutionContext, store: CompileStoreResource):
    it = _iteration(store, context.partition_key)
    with asset_step(context, it.ctx):
        edit = steps.edit_step(it)
        yield dg.MaterializeResult(asset_key="candidate_edit", metadata=edit_meta(it, edit))
        candidate = steps.candidate_step(it, edit)
        yield dg.MaterializeResult(asset_key="candidate_package", metadata=package_meta(it, candidate))
        rollouts = steps.rollouts_step(it, candidate)
        if rollouts is None:  # a task set's: its task rollouts run next, then this step again
            return
        meta = rollouts_meta(it, rollouts)
        if "skill_use_warning" in meta:  # in the run's log too, where people watching a run look
            context.log.warning(f"{it.key}: {meta['skill_use_warning'].value}")
        yield dg.MaterializeResult(asset_key="candidate_rollouts", metadata=meta)
        compared = steps.comparison_step(it, edit, rollouts)
        yield dg.MaterializeResult(asset_key="comparison", metadata=comparison_meta(it, compared))
        decided = steps.decision_step(it, edit, compared)
        meta = decision_meta(it, edit, decided.record, decided.matrix_after, context.run.run_id)
    # Materialized after the step's wrapper has ended, as the assets were before: the wrapper
    # submits the next step first, so the loop sensor, which watches `decision`, finds it asked.
    # Tells accepted and rejected partitions apart in the partition list and the runs table.
    accepted = decided.record.decision.accepted
    context.instance.add_run_tags(context.run.run_id, {"deep/outcome": "accepted" if accepted else "rejected"})
    yield dg.MaterializeResult(asset_key="decision", metadata=meta)
