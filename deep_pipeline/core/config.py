"""Configuration records: the deployment's dimensions and a compile's constants.

A deployment fixes its dimensions once (SPEC §5); a compile may change the models,
the runner and the numeric defaults of SPEC, never the dimensions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer

RunnerName = Literal["chat", "mini-swe-agent", "command", "replay"]

# The longest any duration setting may be (a week): deadlines are clock times, and a
# timeout of 1e308 s overflowed them into "timestamp out of range" on every rollout.
DURATION_MAX_S = 7 * 24 * 3600.0


class Dimension(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")  # also a Dagster asset name
    description: str
    rubric: dict[int, str]  # score 1..5 -> what that score means

    @field_validator("rubric")
    @classmethod
    def _five_levels(cls, rubric: dict[int, str]) -> dict[int, str]:
        if sorted(rubric) != [1, 2, 3, 4, 5]:
            raise ValueError("rubric must define scores 1, 2, 3, 4 and 5")
        return rubric


def _dim(name: str, description: str, *levels: str) -> Dimension:
    return Dimension(name=name, description=description, rubric=dict(enumerate(levels, start=1)))


DEFAULT_DIMENSIONS: tuple[Dimension, ...] = (
    _dim(
        "correctness",
        "What the unit says is true for this task and its tools.",
        "Mostly wrong or misleading for this task; following it causes errors.",
        "Several wrong claims or commands; the traces show the agent misled by it.",
        "Mostly right, with a wrong or outdated detail that matters.",
        "Right for this task; only a minor imprecision.",
        "Entirely right for this task and its tools; nothing the traces contradict.",
    ),
    _dim(
        "actionability",
        "The agent can act on the unit directly.",
        "Vague aims only; the agent cannot tell what to do.",
        "Some direction, but the agent has to guess the steps.",
        "Steps are there but miss commands, paths or values the agent needed.",
        "Concrete steps the agent can follow, with small gaps.",
        "Concrete, ordered, complete steps the agent followed without guessing.",
    ),
    _dim(
        "coverage",
        "The unit covers what the traces show the agent needed.",
        "Misses nearly everything the agent needed here.",
        "Covers a little; the agent searched or guessed for most of it.",
        "Covers the main path; misses cases the traces show mattered.",
        "Covers nearly all the agent needed.",
        "Covers everything the traces show the agent needed, nothing missing.",
    ),
    _dim(
        "clarity",
        "The agent read the unit as it was meant.",
        "The agent misread it in most traces.",
        "Ambiguous; the agent misread important parts.",
        "Mostly clear; some wording led the agent astray.",
        "Clear; at most a small hesitation in the traces.",
        "Unambiguous; the agent read it exactly as meant every time.",
    ),
    _dim(
        "concision",
        "No text the agent did not need.",
        "Mostly text the agent did not need; the useful part is buried.",
        "Much padding or repetition.",
        "Some text the agent did not need.",
        "Tight, with a little excess.",
        "Every sentence earned its place in the traces.",
    ),
)


# Settings that say how the machinery runs, not what the compile decides: left out of the
# compile's identity (SPEC §2), so raising one (a timeout, a key's variable name) and running
# the same command again resumes the compile instead of starting a new one.
OPERATIONAL_SETTINGS: frozenset[str] = frozenset({
    "judge_api_key_env", "editor_api_key_env", "agent_api_key_env",
    "judge_timeout_s", "editor_timeout_s", "agent_timeout_s",
    "step_launch_attempts", "step_retry_backoff_s",
})
# Decision settings added after compiles were first keyed: in a compile's identity only when set
# away from their default. Left in at the default they would change every compile key made before
# they existed; left out there, a default is part of the code, as the rules themselves are, and a
# compile that sets one (a task set that tolerates more loss on one task) gets a key of its own.
IDENTITY_WHEN_SET: frozenset[str] = frozenset({"max_task_loss", "max_edit_growth", "compare_max_pairs", "compare_models",
                                               "max_unit_chars"})
# An environment variable's name (never its value: a value in the config would land on disk).
VARIABLE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class CompileConfig(BaseModel):
    """A compile's effective settings; all but OPERATIONAL_SETTINGS are its identity (SPEC §2),
    IDENTITY_WHEN_SET only when not at their default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    judge_model: str = "local"
    editor_model: str = "local"
    agent_model: str = "local"
    # OpenAI-compatible endpoints (a self-hosted server, a test double); None = provider default.
    judge_api_base: str | None = None
    editor_api_base: str | None = None
    agent_api_base: str | None = None
    # The name of the variable holding the key of the role's `*_api_base` endpoint; unset, that
    # endpoint gets no key at all (a key goes only to the provider it belongs to).
    judge_api_key_env: str | None = Field(default=None, pattern=VARIABLE_NAME)
    editor_api_key_env: str | None = Field(default=None, pattern=VARIABLE_NAME)
    agent_api_key_env: str | None = Field(default=None, pattern=VARIABLE_NAME)
    # Answer caps per role: the editor's bounds how long a rewritten unit may be.
    judge_max_tokens: int = Field(default=1024, ge=64)
    editor_max_tokens: int = Field(default=2048, ge=64)
    agent_max_tokens: int = Field(default=1024, ge=64)
    # Per-call timeouts per role, counted from when a request is sent (not while it waits for
    # a slot); None: 900 s for the embedded local model (a slow CPU), 120 s for a hosted one.
    judge_timeout_s: float | None = Field(default=None, gt=0, le=DURATION_MAX_S)
    editor_timeout_s: float | None = Field(default=None, gt=0, le=DURATION_MAX_S)
    agent_timeout_s: float | None = Field(default=None, gt=0, le=DURATION_MAX_S)
    # The loop sensor's runs of one step, the first included, when a run fails outside the
    # step's own work (core/retry.py); each retry waits step_retry_backoff_s x 1, 2, 4...
    step_launch_attempts: int = Field(default=3, ge=1, le=10)
    step_retry_backoff_s: float = Field(default=10.0, ge=0, le=3600)
    # Rollouts are samples of what the agent does (SPEC §6.4, §10's pass rates): the agent's
    # model samples. The judge is asked for a verdict: deterministic unless compare_samples
    # should see its spread; the editor stays at 0.
    agent_temperature: float = Field(default=0.7, ge=0, le=2)
    judge_temperature: float = Field(default=0.0, ge=0, le=2)
    runner: RunnerName = "chat"
    agent_command: str | None = None
    agent_output_format: Literal["claude-stream-json", "jsonl", "text"] = "text"
    rollouts: int = Field(default=3, ge=1, le=20)
    section_iterations: int = Field(default=6, ge=0)
    paragraph_iterations: int = Field(default=3, ge=0)
    edit_attempts: int = Field(default=3, ge=1)
    gap_threshold: float = Field(default=0.375, ge=0, lt=1)
    rejection_limit: int = Field(default=2, ge=1)
    parallel: int = Field(default=3, ge=1, le=32)  # model calls in flight per compile
    min_gain: float = Field(default=0.5, gt=0)
    # A task set (SPEC §11): an edit whose delta on any one training task is below -max_task_loss
    # is rejected, whatever the mean gain; a compile of one task never reaches that rule.
    max_task_loss: float = Field(default=0.5, ge=0)
    # An edit whose unit's new text is longer than this factor x the old text is rejected before
    # any rollout, `edit_too_large` (core/growth.py); None: no edit is refused for its size.
    max_edit_growth: float | None = Field(default=None, gt=1)
    # The comparison (SPEC §6.5): 2 orders cancel the judge's preference for a position;
    # samples repeat each order; a regression counts only with a quote from a trace.
    compare_orders: Literal[1, 2] = 2
    compare_samples: int = Field(default=1, ge=1, le=5)
    # The sequential comparison (core/sequential.py): with both orders, up to this many pairs
    # (both orders each) while the verdict is unsure; 1 asks one pair, as before the rule.
    compare_max_pairs: int = Field(default=3, ge=1, le=5)
    # The judge panel (core/panel.py): pair k of a comparison is asked of compare_models[k % n],
    # litellm model strings sent where the judge's calls go; None: the judge model alone.
    compare_models: tuple[str, ...] | None = None
    regressions_need_evidence: bool = True
    # The most of one unit's text a judge call carries (SPEC §5): a longer unit is scored from its
    # first part, and the prompt says so. In the identity only when set to another value.
    max_unit_chars: int = Field(default=16_000, ge=500)
    descent_ceiling: float = Field(default=3.5, ge=1, le=5)
    min_paragraphs: int = Field(default=2, ge=1)
    rollout_timeout_s: float = Field(default=600.0, gt=0, le=DURATION_MAX_S)
    max_calls: int | None = Field(default=None, ge=1)
    max_usd: float | None = Field(default=None, gt=0)
    dimensions: tuple[Dimension, ...] = DEFAULT_DIMENSIONS

    @model_serializer(mode="wrap")
    def _unset_new_settings_are_not_written(self, handler):
        """compile.json keeps no `max_edit_growth: null` and no `compare_max_pairs` at its default:
        a compile that leaves them unset writes its config as compiles did before the settings
        existed (and older code still reads it)."""
        data = handler(self)
        if isinstance(data, dict):
            if self.max_edit_growth is None:
                data.pop("max_edit_growth", None)
            for name in ("compare_max_pairs", "max_unit_chars"):
                if getattr(self, name) == type(self).model_fields[name].default:
                    data.pop(name, None)
            if self.compare_models is None:
                data.pop("compare_models", None)
        return data

    @field_validator("compare_models")
    @classmethod
    def _a_panel_every_model_of_which_answers(cls, models, info: ValidationInfo):
        """A panel names each model once, and no more models than pairs can be asked (core/panel.py)."""
        if models is None:
            return None
        from deep_pipeline.core.panel import panel_problem
        from deep_pipeline.core.sequential import most_pairs

        orders, max_pairs = info.data.get("compare_orders", 2), info.data.get("compare_max_pairs", 3)
        problem = panel_problem(models, orders, max_pairs, most_pairs(orders, max_pairs))
        if problem:
            raise ValueError(problem)
        return models

    def identity_settings(self) -> dict:
        """The settings that make the compile's identity (SPEC §2), as JSON values."""
        at_default = {name for name in IDENTITY_WHEN_SET if getattr(self, name) == type(self).model_fields[name].default}
        return self.model_dump(mode="json", exclude=set(OPERATIONAL_SETTINGS) | at_default)

    @property
    def dimension_names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def iteration_budget(self, level: str) -> int:
        return self.section_iterations if level == "section" else self.paragraph_iterations
