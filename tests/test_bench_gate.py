"""benchmarks/bench_gate.py runs end to end on a few iterations, and its simulated world behaves as
described: a noiseless judge's invented claims reject at face value only, and its position bonus
decides the one-order gate only."""

from __future__ import annotations

import pytest

from tests.bench_loader import by_gate, load_bench


@pytest.fixture(scope="module")
def bench():
    yield from load_bench("bench_gate")


def test_the_table_has_the_four_gates_with_rates_and_calls(bench, capsys):
    rows = bench.main(["--iterations", "12", "--setting", "0.5,1", "--markdown"])
    out = capsys.readouterr().out
    assert "| gate | sigma | b | false accepts | false rejects | judge calls / iteration |" in out
    assert "invented-claim rate r = 0.2" in out
    gates = by_gate(rows)
    assert set(gates) == {"original", "two-orders", "samples3", "sequential (default)"} and len(rows) == 4
    for row in rows:
        assert 0 <= row.false_accept <= 1 and 0 <= row.false_reject <= 1
        assert f"| {row.gate} | 0.5 | 1 |" in out
    assert [gates[g].calls_per_iteration for g in ("original", "two-orders", "samples3")] == [1, 2, 6]
    assert 2 <= gates["sequential (default)"].calls_per_iteration <= 6  # one pair, up to three


def test_invented_claims_reject_only_at_face_value(bench, capsys):
    # No noise, no bonus: the scores are the truth, so only the invented claims can mislead.
    gates = by_gate(bench.main(["--iterations", "12", "--setting", "0,0", "--invent-rate", "1"]))
    assert (gates["original"].false_accept, gates["original"].false_reject) == (0, 1)
    for gate in ("two-orders", "sequential (default)"):
        assert (gates[gate].false_accept, gates[gate].false_reject) == (0, 0)


def test_a_position_bonus_decides_only_the_one_order_gate(bench, capsys):
    gates = by_gate(bench.main(["--iterations", "12", "--setting", "0,1", "--invent-rate", "0"]))
    assert gates["original"].false_accept > 0 and gates["original"].false_reject > 0
    for gate in ("two-orders", "sequential (default)"):
        assert (gates[gate].false_accept, gates[gate].false_reject) == (0, 0)
    # A better edit splits the orders (+2 as A, 0 as B); the noiseless later pairs repeat it, all positive.
    assert gates["sequential (default)"].calls_per_iteration > 2


def test_a_malformed_setting_is_one_clear_line(bench, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--setting", "0.5"])
    assert exit_info.value.code == 2
    assert "--setting wants SIGMA,B" in capsys.readouterr().err
