"""The batch schedule: daily, stopped by default; starts compiles for a manifest's new entries."""

import dagster as dg

from deep_pipeline.defs.ops import start_batch

batch_schedule = dg.ScheduleDefinition(
    name="daily_batch",
    job=start_batch,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Each day, start a compile for every batch.yaml entry whose skill + bundle + config has none yet.",
)
