"""Jobs: one per kind of step, plus `start_compile`, `compile` and `start_batch`.

The asset jobs (partitioned as their assets are) use the in-process executor: an iteration is a sequence of five steps
and the multiprocess executor costs ~3 s per step here (DESIGN "Facts measured here").
"""


import dagster as dg

from deep_pipeline.defs.assets.inputs import input_traces
from deep_pipeline.defs.assets.iteration import (
    candidate_edit,
    candidate_package,
    candidate_rollouts,
    comparison,
    decision,
)
from deep_pipeline.defs.assets.output import compile_report, final_skill
from deep_pipeline.defs.ops import compile_op, start_batch_op, start_compile_op

prepare_inputs_job = dg.define_asset_job(
    "prepare_inputs", selection=[input_traces], executor_def=dg.in_process_executor,
    description="The incumbent's traces of one compile.",
)
score_matrix_job = dg.define_asset_job(
    "score_matrix", selection=dg.AssetSelection.groups("matrix"),
    executor_def=dg.in_process_executor, description="Score one matrix: every column, then level_matrix.",
)
iteration_job = dg.define_asset_job(
    "run_iteration",
    selection=[candidate_edit, candidate_package, candidate_rollouts, comparison, decision],
    executor_def=dg.in_process_executor,
    description="One iteration: edit, candidate, rollouts, comparison, decision.",
)
finalize_job = dg.define_asset_job(
    "finalize", selection=[final_skill, compile_report],
    executor_def=dg.in_process_executor, description="Write S_final and the report.",
)


@dg.job(description="Register a compile (skill + task bundle + overrides) for the loop sensor to carry on.")
def start_compile():
    start_compile_op()


@dg.job(name="compile", description="Register a compile and carry it to its end in this run (no daemon needed).")
def compile_job():
    compile_op()


@dg.job(description="Start a compile for each entry of a batch manifest that has none yet.")
def start_batch():
    start_batch_op()


ASSET_JOBS = [prepare_inputs_job, score_matrix_job, iteration_job, finalize_job]
