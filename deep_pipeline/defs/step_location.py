"""The definitions the step jobs run with: every asset, its checks, the step jobs, the evaluation job and the resources.

definitions.py merges these with the op jobs, the sensor and the schedule; the drivers
(runtime/driver.py) execute step jobs from here, so the `compile` op never imports the
code location it belongs to.
"""

import dagster as dg

from deep_pipeline.defs.assets.evaluation import evaluation
from deep_pipeline.defs.assets.inputs import input_traces
from deep_pipeline.defs.assets.iteration import iteration
from deep_pipeline.defs.assets.matrix import build_matrix_assets
from deep_pipeline.defs.assets.output import compile_report, final_skill
from deep_pipeline.defs.assets.timeline import compile_timeline
from deep_pipeline.defs.checks import (
    candidate_keeps_structure,
    final_differs_only_in_edited_markdown,
    report_matches_decisions,
)
from deep_pipeline.defs.jobs import ASSET_JOBS, EVALUATION_JOBS
from deep_pipeline.defs.resources import CompileDefaultsResource, CompileStoreResource, ProviderKeysResource
from deep_pipeline.engine.settings import load_deployment

deployment = load_deployment()

step_defs = dg.Definitions(
    assets=[
        input_traces,
        *build_matrix_assets(deployment.dimensions),
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
