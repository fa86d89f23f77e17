"""core/stats.py against published values.

Wilson: Newcombe (1998a), "Two-sided confidence intervals for the single proportion",
Statistics in Medicine 17:857-872, Table I, method 3 (score, no continuity correction).
Newcombe: Newcombe (1998b), "Interval estimation for the difference between independent
proportions", Statistics in Medicine 17:873-890, Table II, method 10 (hybrid score).
"""

from __future__ import annotations

import pytest

from deep_pipeline.core.stats import newcombe_difference, wilson


@pytest.mark.parametrize("k, n, low, high", [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_interval_matches_newcombe_table_one(k, n, low, high):
    interval = wilson(k, n)
    assert interval.low == pytest.approx(low, abs=5e-5)
    assert interval.high == pytest.approx(high, abs=5e-5)


def test_wilson_interval_at_all_passed_is_not_a_point():
    # 5 of 5: the Wald interval would be [1, 1]; Wilson's low end is 1 - 0.4345 by hand:
    # centre = (1 + z²/10) / (1 + z²/5), half = z·sqrt(z²/100) / (1 + z²/5), z = 1.96.
    interval = wilson(5, 5)
    assert interval.low == pytest.approx(0.5655, abs=5e-5)
    assert interval.high == 1.0


@pytest.mark.parametrize("k1, n1, k2, n2, low, high", [
    (56, 70, 48, 80, 0.0524, 0.3339),
    (9, 10, 3, 10, 0.1705, 0.8090),
    (6, 7, 2, 7, 0.0582, 0.8062),
    (5, 56, 0, 29, -0.0381, 0.1926),
    (0, 10, 0, 20, -0.1611, 0.2775),
    (0, 10, 0, 10, -0.2775, 0.2775),
    (10, 10, 0, 20, 0.6791, 1.0),
    (10, 10, 0, 10, 0.6075, 1.0),
])
def test_newcombe_difference_matches_newcombe_table_two(k1, n1, k2, n2, low, high):
    interval = newcombe_difference(k1, n1, k2, n2)
    assert interval.low == pytest.approx(low, abs=5e-5)
    assert interval.high == pytest.approx(high, abs=5e-5)


@pytest.mark.parametrize("k, n", [(1, 0), (-1, 5), (6, 5)])
def test_wilson_refuses_counts_that_are_not_a_proportion(k, n):
    with pytest.raises(ValueError):
        wilson(k, n)


def test_the_ends_are_exact_at_zero_and_all():
    # Printed in reports and metadata: 0/3 must read 0, not 5.6e-17.
    assert wilson(0, 3).low == 0.0 and wilson(3, 3).high == 1.0
    assert wilson(0, 3).high == pytest.approx(0.5615, abs=1e-4)
