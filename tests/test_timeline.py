"""The live compile timeline: after every step of a compile driven through
Dagster, the latest `compile_timeline` materialization of its partition has one row per step so far."""

from __future__ import annotations

import dagster as dg

from deep_pipeline.runtime.driver import drive_compile
from deep_pipeline.runtime.register import register_with_overrides
from deep_pipeline.defs.partitions import COMPILES
from tests.compile_world import CONFIG, World, install_world, make_inputs


def observations(instance, key: str) -> list[dg.AssetMaterialization]:
    """The timeline's reports for one compile, oldest first."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("compile_timeline")),
                                              limit=1000, ascending=True).records
    return [r.asset_materialization for r in records if r.asset_materialization.partition == key]


def table_rows(observation: dg.AssetMaterialization) -> list[str]:
    """The markdown table's body rows (after the header and the rule)."""
    lines = observation.metadata["timeline"].value.splitlines()
    return [line for line in lines[2:] if line.startswith("| ")]


def test_timeline_has_a_row_per_step_after_every_step(env, scripted_llm):
    # One open cell whose edit the judge likes: inputs, matrix, an accepted iteration, ..., finalize.
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    instance = dg.DagsterInstance.ephemeral()
    skill, bundle = make_inputs(env / "dg")
    record, _ = register_with_overrides(instance, env / "store", skill, bundle, dict(CONFIG))
    seen: list[tuple[int, list[str], dict]] = []

    def after_step(line: str) -> None:  # the driver's progress line comes after each step's run
        latest = observations(instance, record.key)[-1]
        seen.append((len(observations(instance, record.key)), table_rows(latest), latest.metadata))

    report = drive_compile(instance, env / "store", record.key, progress=after_step)

    # one observation per step (the matrix step's columns log none), each with one row more
    assert [count for count, _, _ in seen] == list(range(1, len(seen) + 1))
    assert [len(rows) for _, rows, _ in seen] == list(range(1, len(seen) + 1))
    first_iteration = next(i for i, (_, rows, _) in enumerate(seen) if "[iteration " in rows[-1])
    rows, meta = seen[first_iteration][1], seen[first_iteration][2]
    # mid-compile: the iteration's row carries its outcome, scores, delta, calls and a link to its partition
    assert meta["state"].value == "running" and meta["next_step"].value != "-"
    last = [cell.strip() for cell in rows[-1].strip("|").split("|")]
    assert last[0] == str(first_iteration + 1) and last[4] == "accepted"
    assert "/assets/decision?view=partitions&partition=" in last[1] and "section%2Fi00" in last[1]
    assert "→" in last[5] and last[6].startswith("+") and int(last[9]) >= 2  # edit + comparison calls at least
    assert [row.split("|")[2].split("]")[0].strip(" [").split()[0] for row in rows] == \
        ["inputs", "matrix", "iteration"][: len(rows)] + ["iteration"] * max(0, len(rows) - 3)
    # at the end: the finalize row, and the spend matches the compile's calls log
    final = seen[-1][2]
    assert final["state"].value == "finalized" and "[finalize " in seen[-1][1][-1]
    assert final["steps"].value == len(seen)
    assert final["accepted"].value == sum(d.accepted for d in report.decisions)
    assert final["compile_model_calls"].value == report.usage_total.calls


def test_timeline_is_declared_per_compile(env):
    from deep_pipeline.definitions import defs

    spec = defs.resolve_asset_graph().get(dg.AssetKey("compile_timeline"))
    assert spec.partitions_def.name == COMPILES and not spec.is_materializable
