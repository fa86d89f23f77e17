"""The batch schedule: daily, stopped by default; starts compiles for a manifest's new entries.

The manifest is `<DAGSTER_HOME>/batch.yaml`: one place whatever folder `dagster dev` was
started in (a bare `batch.yaml` would be read from the code server's working directory).
The package ships an example, deep_pipeline/examples/batch.yaml (its paths relative to itself).
"""

from pathlib import Path

import dagster as dg

from deep_pipeline.defs.ops import start_batch
from deep_pipeline.home import dagster_home

MANIFEST_NAME = "batch.yaml"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / MANIFEST_NAME


def batch_manifest() -> Path:
    return dagster_home() / MANIFEST_NAME


@dg.schedule(
    name="daily_batch",
    job=start_batch,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description=f"Each day, start a compile for every entry of $DAGSTER_HOME/{MANIFEST_NAME} whose skill + bundle + "
    f"config has none yet (an example to copy there: deep_pipeline/examples/{MANIFEST_NAME}).",
)
def batch_schedule(context: dg.ScheduleEvaluationContext):
    manifest = batch_manifest()
    if not manifest.is_file():  # a tick that says where the file goes, not a failed run
        return dg.SkipReason(f"no batch manifest at {manifest}: write one there (entries of skill + bundle, "
                             f"paths relative to it), as in {EXAMPLE}")
    return dg.RunRequest(run_config={"ops": {"start_batch_op": {"config": {"manifest": str(manifest)}}}})
