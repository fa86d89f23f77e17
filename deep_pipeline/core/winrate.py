"""S_final's win rate in a judged comparison (SPEC §11): pure arithmetic, no I/O.

Each judge call says which package's traces are better: S_final's win counts 1, a tie
0.5, a loss 0. The rate is the mean over the calls, with Wilson's 95 % score interval
taken on that (possibly half-integer) count: a tie is half a win on both sides, so the
interval of a set of all ties is centred on 0.5 as it should be.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from deep_pipeline.core.stats import Interval, wilson

Outcome = Literal["win", "tie", "loss"]  # S_final's, in one judge call
POINTS: dict[str, float] = {"win": 1.0, "tie": 0.5, "loss": 0.0}


class WinRate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    calls: int
    wins: int
    ties: int
    losses: int
    score: float  # wins + ties / 2
    rate: float  # score / calls
    interval: Interval


def win_rate(outcomes: Iterable[Outcome]) -> WinRate:
    """S_final's win rate over `outcomes` (at least one) and its 95 % Wilson interval."""
    outcomes = list(outcomes)
    if not outcomes:
        raise ValueError("win_rate: no judge call to count")
    unknown = sorted({o for o in outcomes if o not in POINTS})
    if unknown:
        raise ValueError(f"win_rate: unknown outcomes {unknown}; expected win, tie or loss")
    wins, ties, losses = (outcomes.count(o) for o in ("win", "tie", "loss"))
    score = wins + ties / 2
    n = len(outcomes)
    return WinRate(calls=n, wins=wins, ties=ties, losses=losses, score=score, rate=score / n,
                   interval=wilson(score, n))  # type: ignore[arg-type]  # wilson's formula holds for k = x.5
