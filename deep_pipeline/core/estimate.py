"""The most a compile can spend, known before it starts (SPEC §11 "Cost before the run").

`estimate` bounds the model calls and rollouts a compile can make under its config and
its number of training tasks T; `estimate_cost` prices that bound. Pure: the prompt
tokens a call takes and each role's price per token are inputs (a caller fills them from
the skill, the traces and the price map); a completion is bounded by the role's
`*_max_tokens`.

Why the counts bound a run (SPEC §7 as `core.policy` applies it):
- iterations: at most `section_iterations` at section level, and `paragraph_iterations`
  at paragraph level, which runs only when a section coordinate is exhausted, i.e. after
  `rejection_limit` section decisions;
- section matrices <= 1 + section_iterations: the start, then at most one matrix after
  each run of decisions (a refresh needs a selection in the active dimension, which only
  a decision sets; the paragraph level's return refresh follows the exhausting decision);
- paragraph matrices <= 1 + paragraph_iterations: the start may set an active dimension
  with nothing open in it (a refresh before any decision), and no refresh follows the
  decision that spends the level's budget;
- per matrix: one judge call per dimension and training task; per iteration: at most
  `edit_attempts` editor calls, `compare_orders` x `compare_samples` judge calls per task and
  pair, times `compare_max_pairs` pairs when the sequential rule applies (core/sequential.py),
  a judge panel's pair k asked of its model k mod n (core/panel.py: the count is the same, only
  the model, and so the price, of each pair changes),
  `rollouts` rollouts per task; the input batch: `rollouts` per task (fewer when a
  bundle's traces are the incumbent's);
- the `chat` runner's rollout is one agent model call, counted with the compile's calls
  (and its budget); other runners' agents call their models outside the compile.
Each call may take up to `answer_attempts` answers (an invalid answer is asked again,
llm/client.py `structured`) and each answer up to `sends_per_answer` sends (transient
failures resent); both default to 1, the count when every answer is valid at once.
`max_calls`, when set, caps the calls (the budget is reserved before each call).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.models import Record
from deep_pipeline.core.panel import model_of_pair
from deep_pipeline.core import sequential

CallKind = Literal["column", "edit", "compare", "agent"]
Role = Literal["judge", "editor", "agent"]
ROLE_OF: dict[str, Role] = {"column": "judge", "edit": "editor", "compare": "judge", "agent": "agent"}


class Estimate(Record):
    """The most a compile can make: a bound, not a forecast."""

    training_tasks: int
    matrices: dict[str, int]  # per level
    iterations: dict[str, int]  # per level
    rollouts: dict[str, int]  # "input", "candidate"
    calls_by_kind: dict[str, int]  # before the max_calls cap
    calls: int  # all kinds, after the max_calls cap
    capped: bool  # max_calls is below the uncapped sum
    # A judge panel's comparison calls per model (they sum to calls_by_kind["compare"]); None: no panel.
    compare_calls_by_model: dict[str, int] | None = None

    @property
    def total_rollouts(self) -> int:
        return sum(self.rollouts.values())


class RolePrice(Record):
    """USD per token of one role's model; None for a model without a known price."""

    input_per_token: float = Field(ge=0)
    output_per_token: float = Field(ge=0)


class CostEstimate(Record):
    usd_by_kind: dict[str, float | None]  # None: that role's price is unknown
    uncapped_usd: float | None  # None as soon as any kind's cost is unknown
    usd: float | None  # the same, at most max_usd (every priced call is reserved at its worst case first)

    @property
    def text(self) -> str:
        return f"${self.usd:.4f}" if self.usd is not None else "unknown"


def level_bounds(config: CompileConfig) -> tuple[dict[str, int], dict[str, int]]:
    """(matrices per level, iterations per level) at most (see the module docstring)."""
    section = config.section_iterations
    descends = section >= config.rejection_limit
    paragraph = config.paragraph_iterations if descends else 0
    matrices = {"section": 1 + section, "paragraph": 1 + paragraph if descends else 0}
    return matrices, {"section": section, "paragraph": paragraph}


def most_pairs(config: CompileConfig) -> int:
    """The most pairs of calls one task's comparison can ask (core/sequential.py)."""
    return sequential.most_pairs(config.compare_orders, config.compare_max_pairs)


def panel_calls(config: CompileConfig, compare_calls: int) -> dict[str, int] | None:
    """`compare_calls` (a whole number of comparisons of `most_pairs` pairs) split over the judge
    panel: each model gets the share of pairs it answers (core/panel.py); None without a panel."""
    if not config.compare_models:
        return None
    pairs = [model_of_pair(config.compare_models, k) for k in range(most_pairs(config))]
    return {model: compare_calls * pairs.count(model) // len(pairs) for model in config.compare_models}


def estimate(config: CompileConfig, training_tasks: int = 1, *, answer_attempts: int = 1,
             sends_per_answer: int = 1) -> Estimate:
    """The most model calls and rollouts a compile of `training_tasks` tasks can make."""
    if training_tasks < 1 or answer_attempts < 1 or sends_per_answer < 1:
        raise ValueError("training_tasks, answer_attempts and sends_per_answer must each be at least 1")
    tasks = training_tasks
    matrices, iterations = level_bounds(config)
    n_matrices, n_iterations = sum(matrices.values()), sum(iterations.values())
    rollouts = {"input": config.rollouts * tasks, "candidate": n_iterations * config.rollouts * tasks}
    per_call = answer_attempts * sends_per_answer
    by_kind = {
        "column": n_matrices * len(config.dimensions) * tasks * per_call,
        "edit": n_iterations * config.edit_attempts * per_call,
        "compare": n_iterations * config.compare_orders * config.compare_samples * most_pairs(config) * tasks * per_call,
        # A chat rollout's one call is resent on transient failures, never re-asked for validity.
        "agent": sum(rollouts.values()) * sends_per_answer if config.runner == "chat" else 0,
    }
    uncapped = sum(by_kind.values())
    calls = uncapped if config.max_calls is None else min(uncapped, config.max_calls)
    return Estimate(training_tasks=tasks, matrices=matrices, iterations=iterations, rollouts=rollouts,
                    calls_by_kind=by_kind, calls=calls, capped=calls < uncapped,
                    compare_calls_by_model=panel_calls(config, by_kind["compare"]))


def estimate_cost(bound: Estimate, config: CompileConfig, prompt_tokens: dict[str, int],
                  prices: dict[str, RolePrice | None],
                  panel_prices: dict[str, RolePrice | None] | None = None) -> CostEstimate:
    """The bound's cost: each kind's calls x (its prompt tokens x the role's input price +
    the role's max_tokens x its output price). `prompt_tokens` per call kind, `prices`
    per role; a kind whose role has no price is unknown, and so is the total. A judge panel's
    comparison calls are priced per model (`panel_prices`, by `compare_calls_by_model`).

    The max_calls cap is spread over nothing: a capped bound is priced uncapped, an
    upper bound still (the cap says how many calls, not which).
    """
    usd: dict[str, float | None] = {}
    for kind, calls in bound.calls_by_kind.items():
        role = ROLE_OF[kind]
        completion = getattr(config, f"{role}_max_tokens")
        shares = ({model: (n, (panel_prices or {}).get(model)) for model, n in bound.compare_calls_by_model.items()}
                  if kind == "compare" and bound.compare_calls_by_model else {role: (calls, prices.get(role))})
        costs = [0.0 if n == 0 else None if price is None else
                 n * (prompt_tokens.get(kind, 0) * price.input_per_token + completion * price.output_per_token)
                 for n, price in shares.values()]
        usd[kind] = None if None in costs else sum(costs)
    known = [value for value in usd.values() if value is not None]
    total = sum(known) if len(known) == len(usd) else None
    capped = total if total is None or config.max_usd is None else min(total, config.max_usd)
    return CostEstimate(usd_by_kind=usd, uncapped_usd=total, usd=capped)
