"""What an edge between two dynamic partition sets costs.

    .venv/bin/python benchmarks/bench_lineage.py [--upstream 50,2000] [--repeat 5]

The lineage joins the partition sets with `AssetDep(upstream, partition_mapping=AllPartitionMapping())`
(deep_pipeline/defs/partitions.py `across_sets`). A materialization downstream of such an edge
records the data version of its upstream ("provenance"): Dagster lists every upstream
partition and, below SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD (100) of them, reads each
one's data version; at or above it, only the asset's latest. The UI's stale status of a
partition walks the same edge, but only below the threshold.

In a temporary SQLite instance (the storage a DAGSTER_HOME gets), N partitions of an upstream set
(`matrices`) are registered and each materialized once (runless events: the same rows a run
writes); then one partition of a downstream set (`iterations`) is run in-process as the
drivers run a step, with and without the edge, and its stale status is resolved as the UI does.
It prints, per N: the median run time with and without the edge, and the downstream
partition's stale status with the edge after one more upstream materialization.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import CachingStaleStatusResolver
from dagster._core.loader import LoadingContextForTest

MATRICES = dg.DynamicPartitionsDefinition(name="matrices")
ITERATIONS = dg.DynamicPartitionsDefinition(name="iterations")
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # a warning still shows


@dg.asset(partitions_def=MATRICES)
def level_matrix() -> None:
    """The upstream: its materializations are reported, never run here."""


def downstream(edge: bool) -> dg.AssetsDefinition:
    deps = [dg.AssetDep(level_matrix, partition_mapping=dg.AllPartitionMapping())] if edge else []

    @dg.asset(name="candidate_edit", partitions_def=ITERATIONS, deps=deps)
    def candidate_edit() -> None:
        """As cheap as an asset can be: what is timed is Dagster's own work around the step."""

    return candidate_edit


def instance_with(home: Path, upstream: int) -> dg.DagsterInstance:
    instance = dg.DagsterInstance.from_config(str(home))
    keys = [f"c{i // 20:04d}/0/m{i % 20:02d}" for i in range(upstream)]
    instance.add_dynamic_partitions("matrices", keys)
    for key in keys:
        instance.report_runless_asset_event(dg.AssetMaterialization("level_matrix", partition=key))
    return instance


def time_runs(instance: dg.DagsterInstance, edge: bool, repeat: int) -> tuple[float, dg.Definitions]:
    defs = dg.Definitions(assets=[level_matrix, downstream(edge)],
                          jobs=[dg.define_asset_job("run_iteration", selection=["candidate_edit"])])
    job = defs.resolve_job_def("run_iteration")
    seconds = []
    for i in range(repeat + 1):  # the first run warms the imports and the job's caches up
        key = f"edge{int(edge)}/0/i{i:02d}"
        instance.add_dynamic_partitions("iterations", [key])
        started = time.perf_counter()
        result = job.execute_in_process(instance=instance, partition_key=key, run_config=QUIET)
        seconds.append(time.perf_counter() - started)
        assert result.success
    return statistics.median(seconds[1:]), defs


def stale_status(instance: dg.DagsterInstance, defs: dg.Definitions, key: str) -> tuple[str, float]:
    """The downstream partition's status once a new upstream partition materialized after it, by a
    run as a step does (a run's materialization has a data version; a runless one has none)."""
    instance.add_dynamic_partitions("matrices", ["next/1/m00"])
    upstream = dg.Definitions(assets=[level_matrix], jobs=[dg.define_asset_job("score", selection=[level_matrix])])
    assert upstream.resolve_job_def("score").execute_in_process(instance=instance, partition_key="next/1/m00",
                                                             run_config=QUIET).success
    started = time.perf_counter()
    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
    status = resolver.get_status(dg.AssetKey("candidate_edit"), key)
    return status.value, time.perf_counter() - started


def measure(upstream: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        instance = instance_with(Path(tmp), upstream)
        setup = time.perf_counter() - started
        without, _ = time_runs(instance, False, repeat)
        with_edge, defs = time_runs(instance, True, repeat)
        status, resolve_s = stale_status(instance, defs, f"edge1/0/i{repeat:02d}")
        instance.dispose()
    return {"upstream": upstream, "setup_s": setup, "without_s": without, "with_s": with_edge,
            "stale": status, "resolve_s": resolve_s}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", default="50,2000", help="upstream partition counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per case (after one warm-up)")
    args = parser.parse_args(argv)
    print("| upstream partitions | run without edge | run with edge | stale status with edge (resolved in) |")
    print("|---|---|---|---|")
    for n in (int(part) for part in args.upstream.split(",")):
        row = measure(n, args.repeat)
        print(f"| {n} | {row['without_s']:.3f} s | {row['with_s']:.3f} s | "
              f"{row['stale']} ({row['resolve_s'] * 1000:.0f} ms) |", flush=True)


if __name__ == "__main__":
    main()
