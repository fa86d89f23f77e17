"""Dynamic partitions: new compiles, matrices and iterations need no code change; and the
Dagster names of each kind of step, its partition set and its job (known here only).

Keys: `compiles` = `<skill>-<6 hex>`; `matrices` = `<compile>/<level>/m<NN>`;
`iterations` = `<compile>/<level>/i<NN>`; a task set's steps of one training task: `task_rollouts`
= `<compile or iteration>/t<i>` (its rollouts of that step's batch), `task_columns` =
`<matrix>/t<i>` (its part of the matrix's columns) (see deep_pipeline.core.keys).
"""

import dagster as dg

from deep_pipeline.core.actions import StepKind

COMPILES, MATRICES, ITERATIONS = "compiles", "matrices", "iterations"
TASK_ROLLOUTS, TASK_COLUMNS = "task_rollouts", "task_columns"
# The partition set each kind of step is keyed in: known here only (the engine names no set).
PARTITION_SET: dict[StepKind, str] = {"inputs": COMPILES, "matrix": MATRICES, "iteration": ITERATIONS,
                                      "finalize": COMPILES, "rollouts": TASK_ROLLOUTS, "columns": TASK_COLUMNS}
# The job that runs each kind of step (defs/jobs.py defines them): a name, so the drivers, the
# sensor and a step run submitting the next one (runtime/next_run.py) find it without importing
# the jobs, whose assets' wrapper imports runtime/next_run.py.
STEP_JOB: dict[StepKind, str] = {"inputs": "prepare_inputs", "matrix": "score_matrix", "iteration": "run_iteration",
                                 "finalize": "finalize", "rollouts": "roll_out_task", "columns": "score_task_columns"}

compiles_partitions = dg.DynamicPartitionsDefinition(name=COMPILES)
matrices_partitions = dg.DynamicPartitionsDefinition(name=MATRICES)
iterations_partitions = dg.DynamicPartitionsDefinition(name=ITERATIONS)
task_rollouts_partitions = dg.DynamicPartitionsDefinition(name=TASK_ROLLOUTS)
task_columns_partitions = dg.DynamicPartitionsDefinition(name=TASK_COLUMNS)


def across_sets(upstream: str) -> dg.AssetDep:
    """An edge between two partition sets, so the global lineage shows the pipeline in order
    (inputs -> columns -> matrix -> iteration -> output). Dagster has no mapping from one dynamic
    set onto another (custom mappings are deprecated and do not reach the webserver), and the
    default between two dynamic sets is identity, which would ask for partitions that never exist.
    AllPartitionMapping draws the edge and runs nothing: these are `deps`, never loaded, and which
    partition an iteration really read is on its metadata (README "The Dagster mapping"; the cost,
    measured by benchmarks/bench_lineage.py, is in docs/benchmarks.md)."""
    return dg.AssetDep(upstream, partition_mapping=dg.AllPartitionMapping())
