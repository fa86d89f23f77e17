"""The judge panel (SPEC §6.5–6.6 as revised in docs/spec-revisions.md): which model answers
which pair of a comparison, when a comparison may stop with a panel, and each model's verdict.

The rule, once:

- `compare_models` (litellm model strings, each named once) replaces the judge model in the
  comparison only; the matrix's columns stay the judge model's. Unset, the judge model alone
  answers every call, under the keys and records it always had.
- Pair k (both orders, each `compare_samples` times; core/sequential.py) is asked of
  `compare_models[k % n]`: pair 0 of the first model, pair 1 of the second, and so on. A panel
  can have no more models than pairs can be asked (`compare_max_pairs` with both orders, else 1),
  so every model named answers.
- With a panel, a comparison does not stop on a verdict that leans towards acceptance or on
  relevance (`orders_agree`, `not_relevant`) before each of its first min(n, `compare_max_pairs`)
  models has answered a pair; another pair is then asked for `panel_unheard`. The stops no further
  pair can reverse, a kept regression and a pair gain ≤ 0 (the sign test's bound can only fall),
  still end it at once: no call is spent on a decided rejection.
- Each call records the model that answered (`model`), and its cache and calls-log key names that
  model (core/keys.py), so a changed panel never reuses another model's answer.
- The decision reads the calls as before (mean gain, the smallest pair gain); the per-model
  verdicts (`panel_verdicts`: each model's calls and mean gain) are shown to people, read by no rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, model_serializer

from deep_pipeline.core.pairs import PairIndex

PANEL_UNHEARD = "panel_unheard"  # the reason another pair was asked: a panel model not yet heard


def panel_problem(models: Sequence[str], orders: int, max_pairs: int, pairs: int) -> str | None:
    """Why `models` is no panel (one line, without the field's name), else None; `pairs`: the most
    pairs a comparison of `orders` and `max_pairs` asks (core/sequential.py's rule)."""
    if not models:
        return "an empty panel: leave compare_models unset for the judge model alone, or name at least one model"
    for number, model in enumerate(models, start=1):
        if not model.strip():
            return f"model {number} is blank: each entry is a litellm model string or 'local'"
    twice = next((model for number, model in enumerate(models) if model in models[:number]), None)
    if twice is not None:
        return f"{twice!r} is named twice: each panel model answers pairs of its own, name it once"
    if len(models) > pairs:
        return (f"{len(models)} models, but a comparison asks at most {pairs} pair{'s' if pairs != 1 else ''} "
                f"(compare_orders {orders}, compare_max_pairs {max_pairs}), so a model past the {pairs}th would "
                "never answer: name fewer models, or raise compare_max_pairs with both orders")
    return None


def model_of_pair(models: Sequence[str], pair: int) -> str:
    """The panel model that answers pair `pair`."""
    return models[pair % len(models)]


def must_hear(panel_size: int, max_pairs: int) -> int:
    """The pairs a comparison asks before it may stop leaning to accept (one per panel model)."""
    return min(panel_size, max_pairs)


class PanelCall(PairIndex):
    """A call's pair (core/pairs.py) and the model that answered it: None, and not written,
    without a panel (the judge model answered), so such a record reads as before."""

    model: str | None = None

    @model_serializer(mode="wrap")
    def _first_pair_is_not_written(self, handler):  # PairIndex's, by name: one serializer for both fields
        data = handler(self)
        if isinstance(data, dict):
            if self.pair == 0:
                data.pop("pair", None)
            if self.model is None:
                data.pop("model", None)
        return data


class PanelVerdict(BaseModel):
    """One panel model's verdict on a comparison: how many calls it answered and their mean gain."""

    model: str
    calls: int
    mean_gain: float


def panel_verdicts(calls: Sequence) -> list[PanelVerdict]:
    """Each answering model's calls and mean candidate − incumbent delta, in the order the models
    first answered; empty when no call names its model (no panel)."""
    deltas: dict[str, list[int]] = {}
    for call in calls:
        if call.model is not None:
            deltas.setdefault(call.model, []).append(call.candidate_score - call.incumbent_score)
    return [PanelVerdict(model=model, calls=len(values), mean_gain=round(sum(values) / len(values), 4))
            for model, values in deltas.items()]
