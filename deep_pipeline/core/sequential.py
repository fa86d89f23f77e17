"""The sequential comparison (SPEC §6.5–6.6 as revised in the README): when to ask
another pair of judge calls, how an extra pair is re-presented, and the bound the decision reads.

llm/comparator.py asks the calls, core/decision.py decides; the rule itself is here, once:

- It applies only with `compare_orders: 2` and `compare_max_pairs` > 1; otherwise one pair is
  asked (one call per order, each `compare_samples` times), exactly as before.
- A *pair* is both orders (the candidate as A and as B), each asked `compare_samples` times.
  Its *gain* is the mean over its calls of candidate score − incumbent score.
- After each pair, the first of these that holds stops the comparison:
  1. `regression`: some call kept a regression claim against the candidate (valid, or at
     face value with `regressions_need_evidence: false`): the decision rejects anyway;
  2. `not_relevant`: every call so far says the cell is not task-relevant;
  3. `gain_not_positive`: some pair's gain is ≤ 0 (the bound can then never exceed 0);
  4. `orders_agree`: each order's mean delta is ≥ `min_gain` and the mean over all calls is at
     least 0.5 away from `min_gain` (a clear accept);
  5. `max_pairs`: `compare_max_pairs` pairs were asked.
  Otherwise another pair is asked, and why is recorded: `orders_split` when the two orders'
  mean deltas lie on different sides of `min_gain`, else `near_min_gain`. With a judge panel
  (core/panel.py), 2 and 4 wait until each panel model has answered a pair (`panel_unheard`).
- With more than one pair the decision accepts only when the mean gain is ≥ `min_gain` and
  the *gain bound*, the smallest pair gain, is > 0. It is the exact one-sided sign test: if a
  pair's gain were ≤ 0 with probability ≥ 1/2 (the pairs are independent-ish re-presentations),
  all n pair gains would be > 0 with probability ≤ 1/2ⁿ; so "smallest pair gain > 0" is a lower
  confidence bound above 0 on the median pair gain at level 1 − 1/2ⁿ. It assumes no
  distribution, so it holds for a few integer-valued samples, and a tie (0) counts against
  acceptance. With one pair the rule is exactly the earlier one, with no bound.
- Pair 0 shows the traces as before. Every later pair k shows the same content re-presented:
  each version's traces in another order, drawn from a seed made of the order seed and k, under
  fresh blind labels (numbered from k × traces + 1); the units' A/B texts are unchanged. So a
  deterministic judge (temperature 0) sees a new prompt and can answer otherwise.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from deep_pipeline.core.models import CompareCall
from deep_pipeline.core.pairs import MoreReason, PairStop
from deep_pipeline.core.panel import PANEL_UNHEARD, must_hear

CLEAR_MARGIN = 0.5  # how far from min_gain the mean must be for agreeing orders to stop at once
DIGITS = 4  # a mean of at most 10 integer deltas; 4 digits tell every such mean apart


def applies(orders: int, max_pairs: int) -> bool:
    """Does the sequential rule run? Only with both orders and more than one pair allowed."""
    return orders == 2 and max_pairs > 1


def most_pairs(orders: int, max_pairs: int) -> int:
    """The most pairs one comparison asks: `max_pairs` when the rule runs, else one."""
    return max_pairs if applies(orders, max_pairs) else 1


def _mean(values: list[int]) -> float:
    return round(sum(values) / len(values), DIGITS)


def pair_gains(calls: list[CompareCall]) -> list[float]:
    """Each pair's gain, in pair order: the mean candidate − incumbent delta of its calls."""
    by_pair: dict[int, list[int]] = {}
    for call in calls:
        by_pair.setdefault(call.pair, []).append(call.delta)
    return [_mean(by_pair[pair]) for pair in sorted(by_pair)]


def gain_bound(calls: list[CompareCall]) -> float:
    """The sign test's lower bound on the pair gain: the smallest pair gain (see the module docstring)."""
    return min(pair_gains(calls))


class Next(NamedTuple):
    """After a pair: why stop (None: go on), or why ask another pair (None: stop)."""

    stop: PairStop | None
    more: MoreReason | None


def next_pair(calls: list[CompareCall], *, min_gain: float, max_pairs: int, panel: int = 1) -> Next:
    """Stop, or ask another pair, after the pairs in `calls` (the rule in the module docstring);
    with a `panel` of several models, not towards acceptance before each has answered (core/panel.py)."""
    gains = pair_gains(calls)
    unheard = len(gains) < must_hear(panel, max_pairs)
    orders: dict[str, list[int]] = {}
    for call in calls:
        orders.setdefault(call.candidate_label, []).append(call.delta)
    means = [_mean(deltas) for deltas in orders.values()]
    overall = _mean([call.delta for call in calls])
    if any(call.candidate_regressions for call in calls):
        return Next("regression", None)
    if not unheard and not any(call.task_relevant for call in calls):
        return Next("not_relevant", None)
    if min(gains) <= 0:
        return Next("gain_not_positive", None)
    if unheard:
        return Next(None, PANEL_UNHEARD)
    if all(mean >= min_gain for mean in means) and abs(overall - min_gain) >= CLEAR_MARGIN:
        return Next("orders_agree", None)
    if len(gains) >= max_pairs:
        return Next("max_pairs", None)
    split = len({mean >= min_gain for mean in means}) > 1
    return Next(None, "orders_split" if split else "near_min_gain")


def presentation(count: int, order_seed: int, pair: int, version: str) -> list[int]:
    """The order (indexes into the traces) in which pair `pair` shows one version's `count` traces.

    Pair 0 keeps the traces' own order (the calls of one pair read exactly as before). A later
    pair draws its order from (order seed, pair, version) and never repeats the first pair's when
    there are two traces or more, so a deterministic judge sees a different prompt.
    """
    order = list(range(count))
    if pair == 0 or count < 2:
        return order
    random.Random(f"{order_seed}/p{pair}/{version}").shuffle(order)
    if order == list(range(count)):  # the first pair's order again: rotate it away
        order = order[1:] + order[:1]
    return order


def first_label(count: int, pair: int) -> int:
    """The number of a version's first blind trace label in pair `pair`: fresh for every pair."""
    return pair * count + 1


def pair_facts(calls: list[CompareCall], stop: PairStop, reasons: list[MoreReason]) -> dict:
    """What a comparison records of its pairs: nothing for one pair (its record reads as before)."""
    gains = pair_gains(calls)
    if len(gains) < 2:
        return {}
    return {"pairs": len(gains), "gain_bound": min(gains), "stop_reason": stop, "pair_reasons": list(reasons)}
