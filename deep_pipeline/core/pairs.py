"""The record fields a sequential comparison adds (core/sequential.py), written only when used.

A comparison of one pair (every compile made before the sequential rule, and every one with
`compare_orders: 1` or `compare_max_pairs: 1`) writes its records byte for byte as before: a
call of the first pair writes no `pair`, and a comparison or decision of one pair none of
`pairs`, `gain_bound`, `stop_reason`, `pair_reasons`. They are mixins rather than fields in
core/models.py so the rule for leaving them out is written once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_serializer

# Why a sequential comparison stopped asking (core/sequential.py `next_pair`), in the order checked.
PairStop = Literal["regression", "not_relevant", "gain_not_positive", "orders_agree", "max_pairs"]
# Why it asked another pair (`panel_unheard`: a panel model had not answered yet, core/panel.py).
MoreReason = Literal["orders_split", "near_min_gain", "panel_unheard"]
PAIR_FACTS = ("pairs", "gain_bound", "stop_reason", "pair_reasons")


class PairIndex(BaseModel):
    """Which pair of calls (both orders) a call belongs to; 0, the first, is not written."""

    pair: int = Field(default=0, ge=0)

    @model_serializer(mode="wrap")
    def _first_pair_is_not_written(self, handler):
        data = handler(self)
        if isinstance(data, dict) and self.pair == 0:
            data.pop("pair", None)
        return data


class PairFacts(BaseModel):
    """What a comparison of more than one pair adds; all None (and not written) for one pair."""

    pairs: int | None = Field(default=None, ge=2)  # pairs asked
    gain_bound: float | None = None  # the smallest pair gain: the sign test's bound (core/sequential.py)
    stop_reason: PairStop | None = None
    pair_reasons: list[MoreReason] | None = None  # why each pair after the first was asked

    @model_serializer(mode="wrap")
    def _one_pair_writes_no_pair_facts(self, handler):
        return omit_when_none(handler(self), self, PAIR_FACTS)


def omit_when_none(data, record: BaseModel, names: tuple[str, ...]):
    """A dumped record without the fields in `names` that are None: fields added after records
    were first written (a task set's, SPEC §11; a sequential comparison's), so a record that does
    not use them is written exactly as before. Here, not in core/models.py, which imports it."""
    if isinstance(data, dict):
        for name in names:
            if getattr(record, name) is None:
                data.pop(name, None)
    return data
