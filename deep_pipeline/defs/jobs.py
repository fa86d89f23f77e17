"""The step jobs, one per kind of engine step, and `step_defs`: the definitions they run with.

`STEP_JOBS` maps each kind of step (core/actions.py) to its job, named as defs/partitions.py
`STEP_JOB` says (where the drivers, the loop sensor and a step run's submission of the next
step look a step's job up). The asset jobs
(partitioned as their assets are) use the in-process executor: the multiprocess executor costs
~3 s per op here (DESIGN "Facts measured here"); the iteration and the matrix columns are one op
each anyway. `start_compile`, `compile` and `start_batch` are op jobs (ops.py), in-process too.

definitions.py merges `step_defs` with the op jobs, the sensor and the schedule; the drivers
(runtime/driver.py) execute step jobs from `step_defs`, so the `compile` op never imports the
code location it belongs to.
"""

import dagster as dg

from deep_pipeline.core.actions import StepKind
from deep_pipeline.defs.assets.evaluation import evaluation
from deep_pipeline.defs.assets.inputs import input_traces
from deep_pipeline.defs.assets.iteration import iteration
from deep_pipeline.defs.assets.matrix import build_matrix_assets
from deep_pipeline.defs.assets.output import compile_report, final_skill
from deep_pipeline.defs.assets.task_steps import task_columns, task_rollouts
from deep_pipeline.defs.assets.timeline import compile_timeline
from deep_pipeline.defs.checks import (
    candidate_keeps_structure,
    final_differs_only_in_edited_markdown,
    report_matches_decisions,
)
from deep_pipeline.defs.partitions import STEP_JOB
from deep_pipeline.defs.resources import CompileDefaultsResource, CompileStoreResource, ProviderKeysResource
from deep_pipeline.engine.settings import load_deployment
from deep_pipeline.runtime.tags import STEP_TAG


def _step_job(kind: StepKind, selection, description: str):
    # The `deep/step` tag is for people: every run of the job carries it (the runs list filters on it).
    return dg.define_asset_job(STEP_JOB[kind], selection=selection, executor_def=dg.in_process_executor,
                               tags={STEP_TAG: kind}, description=description)


STEP_JOBS = {  # StepKind -> the asset job that runs it
    "inputs": _step_job("inputs", [input_traces], "The incumbent's traces of one compile."),
    "matrix": _step_job("matrix", dg.AssetSelection.groups("matrix"), "Score one matrix: every column, then level_matrix."),
    "iteration": _step_job("iteration", [iteration], "One iteration: edit, candidate, rollouts, comparison, decision."),
    "finalize": _step_job("finalize", [final_skill, compile_report], "Write S_final and the report."),
    "rollouts": _step_job("rollouts", [task_rollouts], "One training task's rollouts of a task set's batch (SPEC §11)."),
    "columns": _step_job("columns", [task_columns], "One training task's part of a task set's matrix columns (SPEC §11)."),
}
ASSET_JOBS = list(STEP_JOBS.values())

# Not a step job: not in STEP_JOBS, so neither the loop sensor nor a driver ever runs it;
# a person asks for it (SPEC §10: after the compile, never inside it).
evaluation_job = dg.define_asset_job(
    "evaluate", selection=[evaluation], executor_def=dg.in_process_executor,
    description="Evaluate a finalized compile: S_fast and S_final rolled out and checked by the verifier.",
)
EVALUATION_JOBS = [evaluation_job]

step_defs = dg.Definitions(
    assets=[
        input_traces,
        task_rollouts,
        task_columns,
        *build_matrix_assets(load_deployment().dimensions),
        iteration,
        final_skill,
        compile_report,
        compile_timeline,
        evaluation,
    ],
    asset_checks=[candidate_keeps_structure, final_differs_only_in_edited_markdown, report_matches_decisions],
    jobs=[*ASSET_JOBS, *EVALUATION_JOBS],
    resources={
        "store": CompileStoreResource(provider_keys=ProviderKeysResource.from_environment()),
        "defaults": CompileDefaultsResource(),
    },
)
