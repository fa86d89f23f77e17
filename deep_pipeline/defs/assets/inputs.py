"""[inputs] The incumbent's traces: imported from the bundle, or S_fast rolled out."""

import dagster as dg

from deep_pipeline.runtime.asset_step import asset_step
from deep_pipeline.defs.metadata import agent_usage_meta, file_ref
from deep_pipeline.defs.partitions import compiles_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.engine.io_steps import input_step
from deep_pipeline.rollouts.replay import replay_note, trace_makers


@dg.asset(
    partitions_def=compiles_partitions,
    group_name="inputs",
    kinds={"python"},
    pool="llm",
    description="The incumbent's traces (batch `input`): the bundle's own when they were made by this "
    "agent and model on this SKILL.md, else S_fast rolled out (SPEC §2).",
)
def input_traces(context: dg.AssetExecutionContext, store: CompileStoreResource) -> dg.MaterializeResult:
    ctx = store.context(context.partition_key)
    with asset_step(context, ctx, first=True):
        batch = input_step(ctx)
    if batch is None:
        return dg.MaterializeResult(metadata={"compile": dg.MetadataValue.text(ctx.cdir.key), "budget_exhausted": True,
                                              **agent_usage_meta(ctx.cdir, "input", ctx.config.runner, ctx.config.agent_model),
                                              **file_ref(ctx.cdir.budget_stop_path)})
    traces = ctx.cdir.traces(batch.batch)
    return dg.MaterializeResult(
        metadata={
            "compile": dg.MetadataValue.text(ctx.cdir.key),
            "source": dg.MetadataValue.text(batch.source),
            "note": dg.MetadataValue.text(batch.note or "-"),
            "traces": dg.MetadataValue.int(len(traces)),
            "timed_out": dg.MetadataValue.int(sum(t.timed_out for t in traces)),
            "errors": dg.MetadataValue.int(sum(t.error_category is not None for t in traces)),
            "skill_sha256": dg.MetadataValue.text(batch.skill_sha256),
            "runner": dg.MetadataValue.text(ctx.config.runner),
            # as the traces name their maker (a replay's: the recorded runs', not the config's model)
            "made_by": dg.MetadataValue.text(", ".join(trace_makers(traces, ctx.record.bundle_agent,
                                                                    ctx.record.bundle_agent_model))),
            "replay": dg.MetadataValue.text(replay_note(traces, batch.skill_sha256) or "-"),
            **agent_usage_meta(ctx.cdir, batch.batch, ctx.config.runner, ctx.config.agent_model),
            **file_ref(ctx.cdir.batch_dir(batch.batch) / "batch.json"),
        }
    )
