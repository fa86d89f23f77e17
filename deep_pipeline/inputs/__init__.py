"""The compiler's inputs (SPEC §2): the skill package and the task bundle."""

from deep_pipeline.inputs.bundle import LoadedBundle, TaskBundle, bundle_json_schema, load_bundle
from deep_pipeline.inputs.skill import SkillPackage, load_skill

__all__ = ["LoadedBundle", "SkillPackage", "TaskBundle", "bundle_json_schema", "load_bundle", "load_skill"]
