"""deep_pipeline: a skill compiler for coding agents, built as a Dagster pipeline."""

__version__ = "0.1.0"
