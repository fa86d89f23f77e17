"""The editor: rewrite one unit for one dimension (SPEC §6.1).

For a headed section the editor is shown and returns the BODY only; the engine
re-attaches the heading line, so the heading is kept by construction (SPEC §4).
"""

from __future__ import annotations

from deep_pipeline.core.config import Dimension
from deep_pipeline.core.models import Cell, LocalEdit, Rejection, Unit
from deep_pipeline.llm.accounting import CallRecord
from deep_pipeline.llm.client import ModelClient
from deep_pipeline.core.units import heading_line, unit_body
from deep_pipeline.llm.prompts import evidence_text, feedback_text, fill, profile, reason_text, rubric_text
from deep_pipeline.llm.render import mark_units
from deep_pipeline.llm.schemas import edit_answer_model

MAX_EDIT_CHARS = 20_000


def _file_line(unit: Unit) -> str:
    """Nothing for a unit of SKILL.md (its prompt as before); else which file of the package it is in."""
    if unit.file == "SKILL.md":
        return ""
    return f"(This is the package file {unit.file}, which SKILL.md sends the agent to; edit only its marked unit.)\n"


def edit_messages(
    *,
    task_prompt: str,
    skill_text: str,
    unit: Unit,
    cell: Cell,
    dimension: Dimension,
    rejections: list[Rejection],
    failed_checks: list[str],
) -> list[dict]:
    heading, body = heading_line(unit), unit_body(unit)
    if heading:
        unit_note = f"Its heading line, kept as it is (do not repeat it): {heading.strip()}"
        new_text_note = "the new body of the unit, without its heading line"
    else:
        unit_note = f"This {unit.level} has no heading line of its own."
        new_text_note = "the full new text of the unit"
    user = fill(
        "editor_user",
        task=task_prompt,
        skill=_file_line(unit) + mark_units(skill_text, [unit]),
        unit_id=unit.unit_id,
        unit_note=unit_note,
        unit_text=body,
        dimension=dimension.name,
        description=dimension.description,
        rubric=rubric_text(dimension),
        score=cell.score,
        reason=reason_text(cell.reason),
        evidence=evidence_text(cell.evidence),
        feedback=feedback_text(rejections, failed_checks),
        new_text_note=new_text_note,
    )
    return [{"role": "system", "content": fill("editor_system")}, {"role": "user", "content": user}]


def propose_edit(
    client: ModelClient,
    *,
    step_key: str,
    task_prompt: str,
    skill_text: str,
    unit: Unit,
    cell: Cell,
    dimension: Dimension,
    rejections: list[Rejection],
    failed_checks: list[str],
) -> tuple[LocalEdit, list[CallRecord]]:
    """LocalEdit.new_text is the BODY of a headed section, the whole text otherwise."""
    limits, _ = profile(client)
    body = unit_body(unit)
    # Room to grow, but no more than the answer budget can hold (~3 chars a token, minus
    # the JSON around it): a bound the model cannot reach only yields cut-off JSON.
    answer_room = max(200, (client.settings.max_tokens - 100) * 3)
    max_chars = min(MAX_EDIT_CHARS, max(1500, 2 * len(body) + 500), answer_room)
    answer_model = edit_answer_model(unit.unit_id, dimension.name, max_chars, limits)
    messages = edit_messages(
        task_prompt=task_prompt,
        skill_text=skill_text,
        unit=unit,
        cell=cell,
        dimension=dimension,
        rejections=rejections,
        failed_checks=failed_checks,
    )
    answer, calls = client.structured(step_key, messages, answer_model, check=_not_blank)
    edit = LocalEdit(
        unit_id=unit.unit_id, dimension=dimension.name, new_text=answer.new_text, edit_summary=answer.edit_summary
    )
    return edit, calls


def _not_blank(answer) -> str | None:
    return "new_text is blank: write the unit's new text" if not answer.new_text.strip() else None
