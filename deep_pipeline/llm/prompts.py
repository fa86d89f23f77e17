"""Prompt templates (package files under `prompts/`) and the pieces they are filled with."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from string import Template

from deep_pipeline.core.config import Dimension
from deep_pipeline.core.models import EvidenceRef, Rejection
from deep_pipeline.llm.render import COMPACT_RENDER, DEFAULT_RENDER, MODEL_READING, RenderLimits, fence_data
from deep_pipeline.llm.schemas import COMPACT_LIMITS, DEFAULT_LIMITS, AnswerLimits


@lru_cache(maxsize=None)
def _template(name: str) -> Template:
    text = resources.files("deep_pipeline.llm").joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")
    return Template(text)


def fill(name: str, **values: object) -> str:
    """The template `prompts/<name>.md` with every `$placeholder` filled (a missing one is a bug)."""
    return _template(name).substitute({key: str(value) for key, value in values.items()})


def rubric_text(dimension: Dimension) -> str:
    return "\n".join(f"{score}: {dimension.rubric[score]}" for score in sorted(dimension.rubric))


def evidence_text(evidence: list[EvidenceRef]) -> str:
    if not evidence:
        return "(none)"
    quotes = "\n".join(f'- [{e.trace_id} step {e.step}] "{e.quote}"' for e in evidence)
    return fence_data(quotes, "quotes from the agent's traces")


def reason_text(reason: str | None) -> str:
    """The judge's reason, fenced: it is a model's reading of the traces and may quote them."""
    return fence_data(reason, "the judge's reason", MODEL_READING) if reason else "(none given)"


def feedback_text(rejections: list[Rejection], failed_checks: list[str]) -> str:
    """Rejected edits fenced (their reasons are the comparator's reading of the traces); the
    failed checks are the engine's own words and stay outside."""
    parts = []
    if rejections:
        lines = "\n".join(
            f"- Rejected edit ({r.score_change}; {r.reason}): {r.edit_summary or '(no summary)'}" for r in rejections
        )
        parts.append(fence_data(lines, "earlier rejected edits and why", MODEL_READING))
    parts += [f"- Your last text failed a check: {check}" for check in failed_checks]
    return "\n".join(parts) if parts else "(none: this is the first attempt)"


def profile(client) -> tuple[AnswerLimits, RenderLimits]:
    """Answer and rendering bounds for a client: compact for the local model's 8k context."""
    if getattr(client, "is_local", False):
        return COMPACT_LIMITS, COMPACT_RENDER
    return DEFAULT_LIMITS, DEFAULT_RENDER
