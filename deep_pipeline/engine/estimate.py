"""A compile's estimate before the run (SPEC §11 "Cost before the run"): `compile --estimate`.

`core.estimate` bounds the calls and rollouts and prices the bound; this fills in what it
takes as inputs, from the loaded skill and bundle, writing nothing and calling no model:
- each call kind's prompt, built by the code that builds the real one (`column_messages`,
  `edit_messages`, `compare_messages`, `chat_messages`) around the largest unit and the
  traces the judge would see, its tokens counted by litellm's token counter (its default
  encoding: local, no tokenizer download), or chars/4 when that fails;
- each role's price per token from litellm's price map (`llm.transport.token_prices`,
  the lookup the budget uses); the embedded `local` model is free; an unpriced model's
  cost is unknown, never guessed.
The traces: the bundle's, repeated up to `rollouts`; with none, the chat runner's own (the
skill as its system prompt, the task, a full `agent_max_tokens` answer); other runners'
traces cannot be known beforehand and are left out (the output says so).
"""

from __future__ import annotations

from itertools import cycle, islice
from typing import Literal

from deep_pipeline.core.config import CompileConfig, Dimension
from deep_pipeline.core.estimate import CostEstimate, Estimate, RolePrice, estimate, estimate_cost
from deep_pipeline.core.models import Cell, EvidenceRef, Record, Rejection, Trace, TraceStep, Unit
from deep_pipeline.core.package import cut_package

TOKEN_COUNTER = "litellm.token_counter"
CHARS_PER_TOKEN = 4
ROLES = ("judge", "editor", "agent")


class CompileEstimate(Record):
    """What `compile --estimate` prints: the bound, and its cost."""

    skill: str
    task: str
    training_tasks: int
    runner: str
    models: dict[str, str]  # role -> model
    bound: Estimate  # every answer valid at its first send
    worst: Estimate  # every answer asked `answer_attempts` times, each sent `sends_per_answer` times
    answer_attempts: int
    sends_per_answer: int
    traces: str  # which traces the prompts were built with
    token_count: Literal["litellm.token_counter", "chars/4"]
    prompt_tokens: dict[str, int]  # per call of each kind
    prices: dict[str, RolePrice | None]  # per role; None: not in the price map
    panel_prices: dict[str, RolePrice | None] | None = None  # per judge panel model (core/panel.py)
    cost: CostEstimate  # of `bound`
    worst_cost: CostEstimate  # of `worst`
    max_calls: int | None
    max_usd: float | None


class _Profile:
    """What the prompt builders ask of a client: whether it is the local model (compact rendering)."""

    def __init__(self, model: str) -> None:
        from deep_pipeline.llm.client import LOCAL_MODEL

        self.is_local = model == LOCAL_MODEL


def estimate_compile(skill, loaded, config: CompileConfig, training_tasks: int = 1) -> CompileEstimate:
    """The estimate of compiling `skill` (inputs.skill.SkillPackage) against `loaded`
    (an inputs.bundle.LoadedBundle, or every training task's) with `config`, for
    `training_tasks` tasks: each call kind priced at its largest prompt over the tasks."""
    from deep_pipeline.llm.client import ANSWER_ATTEMPTS, RETRIES

    bundles = list(loaded) if isinstance(loaded, (list, tuple)) else [loaded]
    loaded = bundles[0]
    tokens, method, traces_note = {}, TOKEN_COUNTER, ""
    for each in bundles:
        traces, note = _traces(skill, each, config)
        counted, how = _count(_prompts(skill, each.bundle.prompt, config, traces))
        tokens = {kind: max(n, tokens.get(kind, 0)) for kind, n in counted.items()}
        method = "chars/4" if how == "chars/4" else method
        traces_note = traces_note or note
    if len(bundles) > 1:
        traces_note += f"; each call kind at its largest prompt over the {len(bundles)} training tasks"
    prices = {role: _price(getattr(config, f"{role}_model")) for role in ROLES}
    panel = {model: _price(model) for model in config.compare_models} if config.compare_models else None
    bound = estimate(config, training_tasks)
    worst = estimate(config, training_tasks, answer_attempts=ANSWER_ATTEMPTS, sends_per_answer=RETRIES + 1)
    return CompileEstimate(
        skill=skill.name, task=", ".join(b.bundle.task_name for b in bundles), training_tasks=training_tasks,
        runner=config.runner,
        models={role: getattr(config, f"{role}_model") for role in ROLES},
        bound=bound, worst=worst, answer_attempts=ANSWER_ATTEMPTS, sends_per_answer=RETRIES + 1,
        traces=traces_note, token_count=method, prompt_tokens=tokens, prices=prices, panel_prices=panel,
        cost=estimate_cost(bound, config, tokens, prices, panel),
        worst_cost=estimate_cost(worst, config, tokens, prices, panel),
        max_calls=config.max_calls, max_usd=config.max_usd,
    )


def _price(model: str) -> RolePrice | None:
    from deep_pipeline.llm.client import LOCAL_MODEL
    from deep_pipeline.llm.transport import token_prices

    if model == LOCAL_MODEL:
        return RolePrice(input_per_token=0.0, output_per_token=0.0)  # our own CPU: free, as the calls log says
    prices = token_prices(model)
    return None if prices is None else RolePrice(input_per_token=prices[0], output_per_token=prices[1])


def _count(prompts: dict[str, list[dict]]) -> tuple[dict[str, int], Literal["litellm.token_counter", "chars/4"]]:
    from deep_pipeline.llm.transport import prompt_tokens

    try:
        return {kind: prompt_tokens(messages) for kind, messages in prompts.items()}, TOKEN_COUNTER
    except Exception:  # noqa: BLE001 - a counter that fails leaves the rule of thumb
        chars = {kind: sum(len(str(m.get("content") or "")) for m in messages) for kind, messages in prompts.items()}
        return {kind: -(-n // CHARS_PER_TOKEN) for kind, n in chars.items()}, "chars/4"


def _traces(skill, loaded, config: CompileConfig) -> tuple[list[Trace], str]:
    """The traces a judge call shows (one batch), and how they were made up."""
    given = list(loaded.bundle.traces)
    n = max(config.rollouts, len(given))
    if given:
        traces = [t.model_copy(update={"trace_id": f"t{i}"}) for i, t in enumerate(islice(cycle(given), n))]
        return traces, f"the bundle's {len(given)} trace(s), as {n} per batch"
    if config.runner == "chat":
        from deep_pipeline.rollouts.base import RolloutTask
        from deep_pipeline.rollouts.chat import chat_messages

        messages = chat_messages(skill.root, RolloutTask(prompt=loaded.bundle.prompt, skill_name=skill.name))
        answer = _filler(skill.skill_text, config.agent_max_tokens * CHARS_PER_TOKEN)
        steps = [TraceStep(step=1, source="system", text=messages[0]["content"]),
                 TraceStep(step=2, source="user", text=messages[1]["content"]),
                 TraceStep(step=3, source="agent", text=answer)]
        traces = [Trace(trace_id=f"t{i}", agent="chat", prompt=loaded.bundle.prompt, steps=steps, final_output=answer)
                  for i in range(n)]
        return traces, f"{n} chat rollouts per batch, each a full agent_max_tokens answer (the bundle has none)"
    return [], f"none: the bundle has none and the {config.runner} runner's cannot be known before the run (not counted)"


def _prompts(skill, task_prompt: str, config: CompileConfig, traces: list[Trace]) -> dict[str, list[dict]]:
    """The largest prompt of each call kind, by characters."""
    from deep_pipeline.llm.comparator import compare_messages
    from deep_pipeline.llm.editor import edit_messages
    from deep_pipeline.llm.judge import column_messages
    from deep_pipeline.llm.prompts import profile

    text = skill.skill_text
    files = {"SKILL.md": text, **skill.files}  # every markdown file that is units (core/package.py)
    sections = cut_package(files, "section")
    unit_sets = [sections] + [cut_package(files, "paragraph", s.unit_id) for s in sections]
    units = [u for units in unit_sets for u in units]
    largest = max(units, key=lambda u: len(u.text))
    text = files[largest.file]  # the editor is shown the largest unit's own file
    dimension = max(config.dimensions, key=lambda d: len(d.description) + sum(len(r) for r in d.rubric.values()))
    judge, editor = _Profile(config.judge_model), _Profile(config.editor_model)

    prompts: dict[str, list[dict]] = {}
    columns = [column_messages(judge, task_prompt=task_prompt, skill_text=skill.skill_text, units=us,
                               dimension=dimension, traces=traces, files=skill.files or None,
                               max_unit_chars=config.max_unit_chars)[0] for us in unit_sets if us]
    prompts["column"] = max(columns, key=_chars)
    limits, _ = profile(editor)
    prompts["edit"] = edit_messages(
        task_prompt=task_prompt, skill_text=text, unit=largest, cell=_worst_cell(largest, dimension, traces, limits, text),
        dimension=dimension, rejections=_rejections(largest, dimension, config, limits, text), failed_checks=[])
    # A judge panel's models may render the traces otherwise than the judge (the local model compactly): the largest.
    judges = [_Profile(model) for model in config.compare_models or (config.judge_model,)]
    prompts["compare"] = max((compare_messages(
        each, task_prompt=task_prompt, unit=largest, old_text=largest.text, new_text=largest.text,
        dimension=dimension, incumbent_traces=traces, candidate_traces=traces, candidate_label="A")[0]
        for each in judges), key=_chars)
    if config.runner == "chat":
        from deep_pipeline.rollouts.base import RolloutTask
        from deep_pipeline.rollouts.chat import chat_messages

        prompts["agent"] = chat_messages(skill.root, RolloutTask(prompt=task_prompt, skill_name=skill.name))
    return prompts


def _worst_cell(unit: Unit, dimension: Dimension, traces: list[Trace], limits, text: str) -> Cell:
    """The editor's cell with the longest reason and evidence a judge's answer may hold."""
    quotes = [EvidenceRef(trace_id=trace.trace_id, step=1, quote=_filler(text, limits.quote_chars))
              for trace in traces[:limits.evidence_items]]
    return Cell(unit_id=unit.unit_id, dimension=dimension.name, score=1, reason=_filler(text, limits.reason_chars),
                evidence=quotes)


def _rejections(unit: Unit, dimension: Dimension, config: CompileConfig, limits, text: str) -> list[Rejection]:
    """The earlier rejections the editor can be shown: fewer than `rejection_limit` (the limit excludes the cell)."""
    return [Rejection(unit_id=unit.unit_id, dimension=dimension.name, score_change="3 -> 3",
                      edit_summary=_filler(text, limits.summary_chars), reason=_filler(text, limits.reason_chars))
            for _ in range(max(0, config.rejection_limit - 1))]


def _filler(source: str, chars: int) -> str:
    """`chars` of text like `source` (words tokenize as words do, not as one repeated letter)."""
    source = source.strip() or "text"
    return "".join(islice(cycle(source), chars))


def _chars(messages: list[dict]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)
