"""Pass-rate statistics for an evaluation (SPEC §10): pure arithmetic, no I/O.

Wilson's score interval for one proportion k/n, and Newcombe's hybrid score interval
(his method 10, Statistics in Medicine 1998) for the difference of two independent
proportions. Both stay inside [0, 1] / [-1, 1] and behave at k = 0 and k = n, where
the textbook Wald interval collapses to a point: with 5 rollouts a side that is the
common case, not the corner.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

Z_95 = 1.959963984540054  # the 97.5 % quantile of the standard normal


class Interval(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float
    high: float


def wilson(k: int, n: int, z: float = Z_95) -> Interval:
    """Wilson's score interval for k successes in n trials (no continuity correction)."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # At k = 0 the low end is 0 exactly in real arithmetic (and the high end 1 at k = n);
    # floating point leaves 5.6e-17, which a report would print as a number.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return Interval(low=low, high=high)


def newcombe_difference(k1: int, n1: int, k2: int, n2: int, z: float = Z_95) -> Interval:
    """Newcombe's hybrid score interval for p1 - p2 (k1/n1 minus k2/n2), independent samples."""
    p1, p2 = k1 / n1 if n1 else 0.0, k2 / n2 if n2 else 0.0
    one, two = wilson(k1, n1, z), wilson(k2, n2, z)
    d = p1 - p2
    low = d - math.sqrt((p1 - one.low) ** 2 + (two.high - p2) ** 2)
    high = d + math.sqrt((one.high - p1) ** 2 + (p2 - two.low) ** 2)
    return Interval(low=max(-1.0, low), high=min(1.0, high))
