"""benchmarks/bench_tasks.py runs end to end on a few edits through the real comparator and
decision rule, and its world behaves as described: the task set asks T times the judge calls,
and a noiseless judge rejects an edit that hurts a training task."""

from __future__ import annotations

import pytest

from tests.bench_loader import load_bench


@pytest.fixture(scope="module")
def bench():
    yield from load_bench("bench_tasks")


def test_the_table_has_both_compiles_and_the_task_set_asks_t_times_the_calls(bench, capsys):
    single, task_set = bench.main(["--edits", "4", "--training", "2", "--held-out", "1", "--markdown"])
    out = capsys.readouterr().out
    assert "| compile | trains on | accepted |" in out and "held-out true gain, task set / single" in out
    assert (single.compile, task_set.compile) == ("single", "task set")
    assert (single.judge_calls, task_set.judge_calls) == (8, 16)  # 2 orders x 1 sample x T per edit


def test_a_noiseless_judge_accepts_only_edits_that_hurt_no_training_task(bench, tmp_path):
    effects = [{"train-0": 1.0, "train-1": -1.0, "held-0": 0.0}, {"train-0": 1.0, "train-1": 1.0, "held-0": -1.0}]
    provider = bench.install(bench.ScriptedLLM())
    try:
        rows = [bench.run_compile(provider, tmp_path, name, trains_on, ["train-0", "train-1"], ["held-0"], effects,
                                  seed=0, sigma=0.0)
                for name, trains_on in (("single", ["train-0"]), ("task set", ["train-0", "train-1"]))]
    finally:
        bench.uninstall(provider)
    single, task_set = rows
    assert single.accepted == 2 and task_set.accepted == 1  # the first edit is task_regressed:train-1
    assert task_set.held_out_hurt == 1 and task_set.training_gain == 1.0
