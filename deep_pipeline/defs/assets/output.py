"""[output] S_final and the compile report, per compile (SPEC §8)."""

import dagster as dg

from deep_pipeline.core.keys import iteration_label
from deep_pipeline.runtime.asset_step import asset_step
from deep_pipeline.defs.metadata import file_ref, text_diff, usage_meta
from deep_pipeline.defs.partitions import across_sets, compiles_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.engine.io_steps import final_skill_step, report_step
from deep_pipeline.report import write_html_report
from deep_pipeline.report.serve import report_url

COMMON = dict(partitions_def=compiles_partitions, group_name="output", kinds={"python"})


@dg.asset(**COMMON, deps=[across_sets("decision")], description="S_final: the final package; every file but the markdown files the decisions edited byte-identical to S_fast.")
def final_skill(context: dg.AssetExecutionContext, store: CompileStoreResource) -> dg.MaterializeResult:
    ctx = store.context(context.partition_key)
    with asset_step(context, ctx):
        final = final_skill_step(ctx)
    return dg.MaterializeResult(
        metadata={
            "status": dg.MetadataValue.text(final.status),
            "final_skill_dir": dg.MetadataValue.path(str(final.folder)),
            "final_package_hash": dg.MetadataValue.text(final.package_hash),
            "input_package_hash": dg.MetadataValue.text(ctx.record.package_hash),
            "changed": dg.MetadataValue.bool(final.package_hash != ctx.record.package_hash),
            "skill_diff": dg.MetadataValue.md(text_diff(
                ctx.cdir.skill_text(), (final.folder / "SKILL.md").read_bytes().decode("utf-8"),
                "SKILL.md (S_fast)", "SKILL.md (S_final)")),
            **_other_files(ctx.cdir.unit_files(), final.folder),
        }
    )


def _other_files(fast: dict[str, str], folder) -> dict:
    """The package's other markdown files that S_final changed (SPEC §4 revised), with their diffs;
    nothing when only SKILL.md could change."""
    changed = {path: (folder / path).read_bytes().decode("utf-8") for path in fast}
    changed = {path: text for path, text in changed.items() if text != fast[path]}
    if not changed:
        return {}
    diffs = "\n\n".join(text_diff(fast[path], text, f"{path} (S_fast)", f"{path} (S_final)")
                         for path, text in changed.items())
    return {"other_files_changed": dg.MetadataValue.json(sorted(changed)), "other_files_diff": dg.MetadataValue.md(diffs)}


@dg.asset(**COMMON, deps=[final_skill], description="report.json: stop reasons, every decision in order, usage per "
          "role; report.html (`report_html`, opened from `report_url`): the compile as one page, heatmaps, timeline, diff and evidence.")
def compile_report(context: dg.AssetExecutionContext, store: CompileStoreResource) -> dg.MaterializeResult:
    ctx = store.context(context.partition_key)
    with asset_step(context, ctx):
        report = report_step(ctx)
        html = write_html_report(ctx.cdir)  # the same page `deep-pipeline report` writes, from the same records
    rows = ["| # | iteration | coordinate | decision | delta | A/B |", "|---|---|---|---|---|---|"]
    for number, d in enumerate(report.decisions, start=1):  # numbered across levels, as `status` does
        delta = f"{d.delta:+.2f}" if d.delta is not None else "-"
        rows.append(f"| {number} | {iteration_label(d.level, d.index)} | {d.coordinate} | {d.reason} | {delta} | "
                    f"{_orders(d)} |")
    return dg.MaterializeResult(
        metadata={
            "status": dg.MetadataValue.text(report.status),
            "stop_reasons": dg.MetadataValue.json({lv.level: lv.stop_reason for lv in report.levels}),
            "decisions": dg.MetadataValue.md("\n".join(rows)),
            "accepted": dg.MetadataValue.int(sum(d.accepted for d in report.decisions)),
            "iterations": dg.MetadataValue.int(len(report.decisions)),
            **usage_meta(report.usage_total, {"judge": report.judge_model, "editor": report.editor_model, "agent": report.agent_model}),
            **file_ref(ctx.cdir.report_path),
            "report_html": dg.MetadataValue.path(str(html)),
            # A link the UI opens: served by `make ui` / `deep-pipeline serve-reports` (a file:// link is not)
            "report_url": dg.MetadataValue.url(report_url(ctx.cdir.key)),
        }
    )


def _orders(decision) -> str:
    """The A/B column: the one order of a single call, or both orders and whether they agreed."""
    if len(decision.call_scores) <= 1:
        return decision.candidate_label or "-"
    return "both, disagree" if decision.order_disagreement else "both"
