"""The Dagster definitions of deep_pipeline: `dagster dev -w workspace.yaml` loads these."""

import dagster as dg

from deep_pipeline.defs.assets.inputs import input_traces
from deep_pipeline.defs.assets.iteration import (
    candidate_edit,
    candidate_package,
    candidate_rollouts,
    comparison,
    decision,
)
from deep_pipeline.defs.assets.matrix import build_matrix_assets
from deep_pipeline.defs.assets.output import compile_report, final_skill
from deep_pipeline.defs.checks import (
    candidate_keeps_structure,
    final_differs_only_in_skill_md,
    report_matches_decisions,
)
from deep_pipeline.defs.jobs import ASSET_JOBS, compile_job, start_batch, start_compile
from deep_pipeline.defs.resources import (
    CompileDefaultsResource,
    CompileStoreResource,
    ProviderKeysResource,
)
from deep_pipeline.defs.schedules import batch_schedule
from deep_pipeline.defs.sensors import compile_loop_sensor
from deep_pipeline.engine.settings import load_deployment

deployment = load_deployment()

defs = dg.Definitions(
    assets=[
        input_traces,
        *build_matrix_assets(deployment.dimensions),
        candidate_edit,
        candidate_package,
        candidate_rollouts,
        comparison,
        decision,
        final_skill,
        compile_report,
    ],
    asset_checks=[candidate_keeps_structure, final_differs_only_in_skill_md, report_matches_decisions],
    jobs=[*ASSET_JOBS, start_compile, compile_job, start_batch],
    sensors=[compile_loop_sensor],
    schedules=[batch_schedule],
    resources={
        "store": CompileStoreResource(provider_keys=ProviderKeysResource.from_environment()),
        "defaults": CompileDefaultsResource(),
    },
)
