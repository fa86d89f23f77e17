"""The structured answers the model must give, as pydantic models.

Every string is bounded, every list capped and every score an integer 1–5, and the
column answer has exactly one required property per unit id: under llama.cpp's
JSON-schema grammar even a 135M model then returns JSON that parses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from deep_pipeline.core.models import REGRESSION_KINDS

M = TypeVar("M", bound=BaseModel)


class AnswerLimits(BaseModel):
    """Bounds of an answer. Small models get small ones: their output budget is short."""

    model_config = ConfigDict(frozen=True)

    reason_chars: int = 300
    quote_chars: int = 200
    evidence_items: int = 3
    regressions: int = 5
    summary_chars: int = 300


DEFAULT_LIMITS = AnswerLimits()
COMPACT_LIMITS = AnswerLimits(reason_chars=120, quote_chars=100, evidence_items=1, regressions=2, summary_chars=120)

_STRICT = ConfigDict(extra="forbid")


def evidence_model(limits: AnswerLimits) -> type[BaseModel]:
    return create_model(
        "Evidence",
        __config__=_STRICT,
        trace_id=(str, Field(min_length=1, max_length=120)),
        step=(int, Field(ge=1, le=100_000)),
        quote=(str, Field(min_length=1, max_length=limits.quote_chars)),
    )


def evidence_field(limits: AnswerLimits) -> tuple:
    """Evidence: the model is shown the bounded shape, but nothing in it is enforced.

    Invalid evidence is dropped and counted, never a reason to retry (SPEC §3), so the
    items are parsed loosely here and checked one by one against the traces later.
    """
    item = evidence_model(limits).model_json_schema()
    return (list[Any], Field(json_schema_extra={"items": item, "maxItems": limits.evidence_items}))


def regression_field(limits: AnswerLimits) -> tuple:
    """Regression claims: shown with their shape (a kind, where, a quote), checked one by one later.

    Like evidence, a claim that is malformed or not in its trace is dropped and counted
    (SPEC §6.5), never a reason to retry the call.
    """
    item = create_model(
        "Regression",
        __config__=_STRICT,
        kind=(Literal[REGRESSION_KINDS], ...),  # type: ignore[valid-type]
        trace_id=(str, Field(min_length=1, max_length=120)),
        step=(int, Field(ge=1, le=100_000)),
        quote=(str, Field(min_length=1, max_length=limits.quote_chars)),
    ).model_json_schema()
    return (list[Any], Field(json_schema_extra={"items": item, "maxItems": limits.regressions}))


def cell_model(limits: AnswerLimits) -> type[BaseModel]:
    # Evidence and reason come before the score so a model reasons before it scores.
    return create_model(
        "CellAnswer",
        __config__=_STRICT,
        evidence=evidence_field(limits),
        reason=(str, Field(max_length=limits.reason_chars)),
        score=(int, Field(ge=1, le=5)),
    )


def column_answer_model(unit_ids: list[str], limits: AnswerLimits = DEFAULT_LIMITS) -> type[BaseModel]:
    """One required property per unit id, nothing else allowed.

    Unit ids ("s01-setup") are not Python names, so fields are `u0`, `u1`, … with the
    unit id as alias; the JSON schema and validation both use the alias.
    """
    if not unit_ids or len(set(unit_ids)) != len(unit_ids):
        raise ValueError(f"a column needs distinct unit ids, got {unit_ids!r}")
    cell = cell_model(limits)
    fields = {f"u{i}": (cell, Field(alias=unit_id)) for i, unit_id in enumerate(unit_ids)}
    model = create_model("ColumnAnswer", __config__=ConfigDict(extra="forbid"), **fields)
    model.unit_ids = tuple(unit_ids)  # type: ignore[attr-defined]
    return model


def column_cells(answer: BaseModel) -> dict[str, BaseModel]:
    """Unit id -> that unit's cell answer."""
    unit_ids = type(answer).unit_ids  # type: ignore[attr-defined]
    return {unit_id: getattr(answer, f"u{i}") for i, unit_id in enumerate(unit_ids)}


def edit_answer_model(
    unit_id: str, dimension: str, max_chars: int, limits: AnswerLimits = DEFAULT_LIMITS
) -> type[BaseModel]:
    """SPEC §6.1: {unit_id, dimension, new_text, edit_summary}; the ids are constants."""
    return create_model(
        "EditAnswer",
        __config__=_STRICT,
        unit_id=(Literal[unit_id], ...),  # type: ignore[valid-type]
        dimension=(Literal[dimension], ...),  # type: ignore[valid-type]
        edit_summary=(str, Field(max_length=limits.summary_chars)),
        new_text=(str, Field(min_length=1, max_length=max_chars)),
    )


def compare_answer_model(limits: AnswerLimits = DEFAULT_LIMITS) -> type[BaseModel]:
    """The blind verdict: both sides as A and B, each with its own regressions and evidence."""
    return create_model(
        "CompareAnswer",
        __config__=_STRICT,
        evidence_a=evidence_field(limits),
        evidence_b=evidence_field(limits),
        regressions_a=regression_field(limits),
        regressions_b=regression_field(limits),
        reason=(str, Field(max_length=limits.reason_chars)),
        task_relevant=(bool, ...),
        score_a=(int, Field(ge=1, le=5)),
        score_b=(int, Field(ge=1, le=5)),
    )


def response_format(model: type[BaseModel], *, strict: bool) -> dict:
    """litellm's `response_format` for a pydantic model (OpenAI json_schema shape).

    `strict` is only asked of the local llama.cpp server: hosted providers' strict
    modes reject length and range keywords, and the answer is validated here anyway.
    """
    return {
        "type": "json_schema",
        "json_schema": {"name": model.__name__, "schema": model.model_json_schema(), "strict": strict},
    }


def describe_errors(error: ValidationError) -> str:
    """One line naming each wrong place, e.g. `s02: Field required; bogus: Extra inputs…`."""
    parts = []
    for item in error.errors()[:12]:
        where = ".".join(str(p) for p in item["loc"]) or "answer"
        parts.append(f"{where}: {item['msg']}")
    more = len(error.errors()) - 12
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def parse_answer(text: str, response_model: type[M], check: Callable[[M], str | None] | None) -> tuple[M | None, str]:
    """The answer as `response_model`, or None and one line saying what is wrong (schema or `check`)."""
    try:
        answer = response_model.model_validate_json(_strip_fence(text))
    except ValidationError as exc:
        return None, describe_errors(exc)
    problem = check(answer) if check else None
    return (None, problem) if problem else (answer, "")


def _strip_fence(text: str) -> str:
    """Some hosted models wrap JSON in a ```json fence even when asked not to."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```"):
        stripped = stripped[3:-3]
        if stripped.startswith("json"):
            stripped = stripped[4:]
    return stripped
