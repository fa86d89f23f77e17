"""The judge's column call: one dimension, every unit of a level (SPEC §5)."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from deep_pipeline.core.config import Dimension
from deep_pipeline.core.models import Cell, EvidenceRef, Trace, Unit
from deep_pipeline.llm.accounting import CallRecord
from deep_pipeline.llm.client import ModelClient
from deep_pipeline.llm.prompts import fill, profile, rubric_text
from deep_pipeline.llm.render import fence_data, mark_package, render_traces
from deep_pipeline.llm.schemas import column_answer_model, column_cells


class ColumnResult(BaseModel):
    cells: list[Cell]
    dropped_evidence: int
    calls: list[CallRecord]
    prompt_chars: int
    shared_prefix_chars: int  # chars before the first per-dimension character: same in all columns


def column_messages(
    client: ModelClient,
    *,
    task_prompt: str,
    skill_text: str,
    units: list[Unit],
    dimension: Dimension,
    traces: list[Trace],
    files: dict[str, str] | None = None,
    unread: list[str] | None = None,
    max_unit_chars: int | None = None,
) -> tuple[list[dict], int]:
    """The messages and the length of their shared prefix.

    Stable content (instructions, task, marked SKILL.md, traces) comes first and the
    dimension last, so the columns of one matrix share a long prefix that provider
    prompt caches and llama.cpp's slot cache reuse. `files`: the package's other markdown
    files that are units (core/package.py); `unread`: those no rollout opened.
    """
    _, render = profile(client)
    system = fill("judge_system")
    context = fill(
        "judge_context", task=task_prompt, skill=mark_package({"SKILL.md": skill_text, **(files or {})}, units, unread, max_unit_chars),
        traces=fence_data(render_traces(traces, render), "the agent's traces"),
    )
    unit_ids = ", ".join(u.unit_id for u in units)
    column = fill(
        "judge_column",
        dimension=dimension.name,
        description=dimension.description,
        rubric=rubric_text(dimension),
        unit_ids=unit_ids,
    )
    messages = [{"role": "system", "content": system}, {"role": "user", "content": context + column}]
    return messages, len(system) + len(context)


def score_column(
    client: ModelClient,
    *,
    step_key: str,
    task_prompt: str,
    skill_text: str,
    units: list[Unit],
    dimension: Dimension,
    traces: list[Trace],
    files: dict[str, str] | None = None,
    unread: list[str] | None = None,
    max_unit_chars: int | None = None,
) -> ColumnResult:
    limits, _ = profile(client)
    messages, shared = column_messages(
        client, task_prompt=task_prompt, skill_text=skill_text, units=units, dimension=dimension, traces=traces,
        files=files, unread=unread, max_unit_chars=max_unit_chars,
    )
    answer_model = column_answer_model([u.unit_id for u in units], limits)
    answer, calls = client.structured(step_key, messages, answer_model)
    cells: list[Cell] = []
    for unit_id, cell in column_cells(answer).items():
        kept, dropped = checked_evidence(cell.evidence, traces)
        cells.append(
            Cell(
                unit_id=unit_id,
                dimension=dimension.name,
                score=cell.score,
                reason=cell.reason,
                evidence=kept,
                dropped_evidence=dropped,
            )
        )
    return ColumnResult(
        cells=cells,
        dropped_evidence=sum(c.dropped_evidence for c in cells),
        calls=calls,
        prompt_chars=sum(len(m["content"]) for m in messages),
        shared_prefix_chars=shared,
    )


def checked_evidence(
    items: list, traces: list[Trace], rename: dict[str, str] | None = None
) -> tuple[list[EvidenceRef], int]:
    """The model's evidence as EvidenceRefs, validated against `traces` (SPEC §3).

    Items arrive as the model wrote them; one that is not a {trace_id, step, quote}
    object is dropped and counted like a quote that is not in its step.
    `rename` maps the labels the model saw back to trace ids (the comparator's blind labels).
    """
    from deep_pipeline.core.evidence import validate_evidence

    refs, malformed = [], 0
    for item in items:
        data = item.model_dump() if isinstance(item, BaseModel) else item
        try:
            ref = EvidenceRef.model_validate(data)
        except ValidationError:
            malformed += 1
            continue
        refs.append(ref.model_copy(update={"trace_id": (rename or {}).get(ref.trace_id, ref.trace_id)}))
    kept, dropped = validate_evidence(refs, traces)
    return kept, dropped + malformed
