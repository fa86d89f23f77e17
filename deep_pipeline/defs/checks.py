"""Asset checks. Each has `partitions_def=`: without it a check loads every partition."""


import warnings

import dagster as dg

# `partitions_def` on an asset check is a Dagster preview; it is what keeps a check from
# loading every partition (DESIGN.md), so it is used on purpose.
warnings.filterwarnings("ignore", category=dg.PreviewWarning, message=".*partitions_def on an AssetCheckSpec.*")

from deep_pipeline.core.keys import iteration_key, parse_key
from deep_pipeline.core.lines import front_matter_end
from deep_pipeline.core.units import section_outline
from deep_pipeline.defs.assets.output import compile_report, final_skill
from deep_pipeline.defs.partitions import compiles_partitions, iterations_partitions
from deep_pipeline.defs.resources import CompileStoreResource
from deep_pipeline.engine.records import CandidateRecord, EditRecord, Report
from deep_pipeline.core.models import Decision
from deep_pipeline.core.package import file_of, package_sha256
from deep_pipeline.store import package_files, read_model, sha256_file


@dg.asset_check(asset="candidate_package", partitions_def=iterations_partitions, description="The candidate keeps the section list and the front matter.")
def candidate_keeps_structure(context: dg.AssetCheckExecutionContext, store: CompileStoreResource) -> dg.AssetCheckResult:
    compile_key, level, _, index = parse_key(context.partition_key)
    folder = store.context(compile_key).cdir.iteration_dir(level, index)
    record = read_model(folder / "candidate.json", CandidateRecord)
    if record.skipped:
        return dg.AssetCheckResult(passed=True, metadata={"skipped": record.skipped})
    edit = read_model(folder / "edit.json", EditRecord)
    cdir = store.context(compile_key).cdir
    candidate = folder / "candidate"
    files = {p: (candidate / p).read_bytes().decode("utf-8") for p in ["SKILL.md", *cdir.unit_files()]}
    new = files[edit.unit.file]  # the edited file: SKILL.md or another markdown file of the package
    # The file the edit was made on: the candidate with the unit's old text put back.
    start = edit.unit.start
    base = new[:start] + edit.unit_text_before + new[start + len(edit.unit_text_after) :]
    same_outline = section_outline(new) == section_outline(base)
    same_front = new[: front_matter_end(new)] == base[: front_matter_end(base)]
    return dg.AssetCheckResult(
        passed=same_outline and same_front and package_sha256({**files, edit.unit.file: base}) == edit.base_skill_sha256,
        metadata={"same_sections": same_outline, "same_front_matter": same_front},
    )


@dg.asset_check(asset=final_skill, partitions_def=compiles_partitions,
                description="S_final differs from S_fast only in markdown files the decisions edited.")
def final_differs_only_in_edited_markdown(context: dg.AssetCheckExecutionContext, store: CompileStoreResource) -> dg.AssetCheckResult:
    cdir = store.context(context.partition_key).cdir
    before, after = cdir.input_skill, cdir.final_skill
    files_before, files_after = package_files(before), package_files(after)
    # SKILL.md, and the other files an accepted decision's unit is in (core/package.py).
    edited = {"SKILL.md"} | {file_of(d.coordinate.unit_id) for d in cdir.history().events
                             if isinstance(d, Decision) and d.accepted}
    # Compared by streamed hashes: a large file of the package is never held in memory (twice).
    differing = [str(p) for p in files_after if p in files_before and sha256_file(before / p) != sha256_file(after / p)]
    unexpected = [p for p in differing if p not in edited]
    same_list = files_before == files_after
    return dg.AssetCheckResult(passed=same_list and not unexpected, metadata={
        "same_file_list": same_list, "files_changed": differing, "other_files_changed": unexpected})


@dg.asset_check(asset=compile_report, partitions_def=compiles_partitions, description="The report's decisions equal the decision materializations.")
def report_matches_decisions(context: dg.AssetCheckExecutionContext, store: CompileStoreResource) -> dg.AssetCheckResult:
    cdir = store.context(context.partition_key).cdir
    report = read_model(cdir.report_path, Report)
    recorded = decision_materializations(context.instance, cdir.key)
    reported = {iteration_key(cdir.key, d.level, d.index): (str(d.coordinate), d.reason) for d in report.decisions}
    missing = sorted(set(reported) - set(recorded))
    differing = sorted(k for k in reported if k in recorded and recorded[k] != reported[k])
    extra = sorted(set(recorded) - set(reported))
    return dg.AssetCheckResult(
        passed=not (missing or differing or extra),
        metadata={"decisions": len(reported), "missing": missing, "differing": differing, "extra": extra},
    )


def decision_materializations(instance: dg.DagsterInstance, compile_key: str) -> dict[str, tuple[str, str]]:
    """Latest decision materialization per iteration key of one compile: (coordinate, reason)."""
    found: dict[str, tuple[str, str]] = {}
    cursor = None
    while True:
        result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("decision")), limit=500, cursor=cursor, ascending=True)
        for rec in result.records:
            mat = rec.asset_materialization
            if mat and mat.partition and mat.partition.startswith(f"{compile_key}/"):
                meta = mat.metadata
                found[mat.partition] = (meta["coordinate"].value, meta["reason"].value)
        if not result.has_more:
            return found
        cursor = result.cursor
