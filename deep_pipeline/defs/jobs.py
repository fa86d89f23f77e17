"""The step jobs: one per kind of engine step (`start_compile`, `compile` and `start_batch` are in ops.py).

Each asset job runs one kind of engine step, named by its `deep/step` tag (runtime/tags.py).
The asset jobs (partitioned as their assets are) use the in-process executor: the multiprocess executor costs
~3 s per op here (DESIGN "Facts measured here"); the iteration and the matrix columns are one op each anyway.
"""


import dagster as dg

from deep_pipeline.defs.assets.evaluation import evaluation
from deep_pipeline.defs.assets.inputs import input_traces
from deep_pipeline.defs.assets.iteration import iteration
from deep_pipeline.defs.assets.output import compile_report, final_skill
from deep_pipeline.runtime.tags import STEP_TAG

prepare_inputs_job = dg.define_asset_job(
    "prepare_inputs", selection=[input_traces], executor_def=dg.in_process_executor, tags={STEP_TAG: "inputs"},
    description="The incumbent's traces of one compile.",
)
score_matrix_job = dg.define_asset_job(
    "score_matrix", selection=dg.AssetSelection.groups("matrix"), tags={STEP_TAG: "matrix"},
    executor_def=dg.in_process_executor, description="Score one matrix: every column, then level_matrix.",
)
iteration_job = dg.define_asset_job(
    "run_iteration",
    selection=[iteration],
    executor_def=dg.in_process_executor, tags={STEP_TAG: "iteration"},
    description="One iteration: edit, candidate, rollouts, comparison, decision.",
)
finalize_job = dg.define_asset_job(
    "finalize", selection=[final_skill, compile_report], tags={STEP_TAG: "finalize"},
    executor_def=dg.in_process_executor, description="Write S_final and the report.",
)


ASSET_JOBS = [prepare_inputs_job, score_matrix_job, iteration_job, finalize_job]

# Not a step job: no `deep/step` tag and not in ASSET_JOBS, so neither the loop sensor nor
# a driver ever runs it; a person asks for it (SPEC §10: after the compile, never inside it).
evaluation_job = dg.define_asset_job(
    "evaluate", selection=[evaluation], executor_def=dg.in_process_executor,
    description="Evaluate a finalized compile: S_fast and S_final rolled out and checked by the verifier.",
)
EVALUATION_JOBS = [evaluation_job]
