"""`compile_timeline`: a compile's steps so far, one row each (runtime/timeline.py logs it).

An external asset: each step's last asset reports a materialization of it for the compile's
partition, so its page (the latest metadata, and its history under Events) shows a running
compile's state after every step.
"""

import dagster as dg

from deep_pipeline.defs.partitions import compiles_partitions
from deep_pipeline.runtime.timeline import TIMELINE_ASSET

compile_timeline = dg.AssetSpec(
    TIMELINE_ASSET,
    partitions_def=compiles_partitions,
    group_name="output",
    kinds={"python"},
    description="A compile's live timeline: one row per finished step (kind, level, coordinate, outcome, scores, "
                "delta, reason, when it ended, calls and cost, a link to its partition), reported after every step.",
)
