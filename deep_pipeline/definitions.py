"""The code location of deep_pipeline: `dagster dev -w workspace.yaml` and `dg` load `defs` from here."""

import dagster as dg

from deep_pipeline.defs.ops import compile_job, start_batch, start_compile
from deep_pipeline.defs.schedules import batch_schedule
from deep_pipeline.defs.sensors import compile_loop_sensor
from deep_pipeline.defs import jobs

defs = dg.Definitions.merge(
    jobs.step_defs,  # imported as a module: one Definitions object at this module's scope
    dg.Definitions(jobs=[start_compile, compile_job, start_batch], sensors=[compile_loop_sensor], schedules=[batch_schedule]),
)
