"""[matrix] One asset per dimension (a matrix column) and `level_matrix`, per matrix key.

The columns are outputs of one `@multi_asset` step that scores them on a small thread
pool and yields each the moment it is done: one process instead of five (each would
pay the dagster + litellm import), and each column still materialized and stored on
its own, so a crash repeats only the columns not yet done.
"""


from collections.abc import Sequence

import dagster as dg

from deep_pipeline.core.config import Dimension
from deep_pipeline.core.keys import parse_key
from deep_pipeline.runtime.asset_step import asset_step
from deep_pipeline.defs.metadata import file_ref, matrix_meta, usage_meta
from deep_pipeline.defs.pages import column_table
from deep_pipeline.defs.partitions import across_sets, matrices_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.engine.matrix_steps import MatrixStep, assemble_matrix, score_columns


def column_key(dimension: str) -> dg.AssetKey:
    return dg.AssetKey(["matrix", dimension])


def _matrix(store: CompileStoreResource, partition_key: str) -> MatrixStep:
    compile_key, level, _, index = parse_key(partition_key)
    return MatrixStep(store.context(compile_key), level, index)


def build_matrix_assets(dimensions: Sequence[Dimension]) -> list[dg.AssetsDefinition]:
    specs = [
        dg.AssetSpec(
            column_key(dim.name),
            partitions_def=matrices_partitions,
            group_name="matrix",
            kinds={"python"},
            description=f"Matrix column `{dim.name}`: {dim.description} One judge call scores every unit.",
            skippable=True,  # a budget stop leaves later columns unscored
            deps=[across_sets("input_traces"), across_sets("task_columns")],
        )
        for dim in dimensions
    ]

    @dg.multi_asset(specs=specs, name="matrix_columns", partitions_def=matrices_partitions, pool="llm")
    def matrix_columns(context: dg.AssetExecutionContext, store: CompileStoreResource):
        # Read what is stored under the step lock, after any other step of the compile.
        with asset_step(context, store.context(parse_key(context.partition_key)[0])):
            step = _matrix(store, context.partition_key)
            if step.record is not None:  # already scored: re-record the stored columns
                columns = step.stored_columns()
            else:
                columns = score_columns(step)
            models = {"judge": step.ctx.config.judge_model}
            for column in columns:
                scores = {c.unit_id: float(c.score) for c in column.cells}
                yield dg.MaterializeResult(
                    asset_key=column_key(column.dimension),
                    metadata={
                        "cells": dg.MetadataValue.md(column_table(column.cells)),
                        "scores": dg.MetadataValue.json(scores),
                        "mean_score": dg.MetadataValue.float(sum(scores.values()) / max(len(scores), 1)),
                        "dropped_evidence": dg.MetadataValue.int(column.dropped_evidence),
                        "shared_prefix_fraction": dg.MetadataValue.float(column.shared_prefix_fraction),
                        **usage_meta(column.usage, models),
                        **file_ref(step.column_path(column.dimension)),
                    },
                )

    @dg.asset(
        partitions_def=matrices_partitions,
        group_name="matrix",
        kinds={"python"},
        deps=[column_key(d.name) for d in dimensions],
        description="A level's score matrix (every unit x every dimension), built from its columns (SPEC §5).",
    )
    def level_matrix(context: dg.AssetExecutionContext, store: CompileStoreResource) -> dg.MaterializeResult:
        with asset_step(context, store.context(parse_key(context.partition_key)[0])):
            step = _matrix(store, context.partition_key)
            record = assemble_matrix(step)
        return dg.MaterializeResult(
            metadata={
                "compile": dg.MetadataValue.text(step.ctx.cdir.key),
                "level": dg.MetadataValue.text(record.matrix.level),
                "reason": dg.MetadataValue.text(record.reason),
                "section": dg.MetadataValue.text(record.matrix.section_id or "-"),
                **matrix_meta(record.matrix),
                # the columns' calls again, summed: prefixed, so model_calls over a compile's assets sums right
                **usage_meta(record.usage, {"judge": step.ctx.config.judge_model}, prefix="columns_"),
                **file_ref(step.folder / "matrix.json"),
            }
        )

    return [matrix_columns, level_matrix]
