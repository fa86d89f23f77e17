"""The Dagster layer: assets, checks, jobs, ops, partitions, resources, schedules, sensors.

It only wires and records; the rules live in `deep_pipeline.core`, the steps in `deep_pipeline.engine`.
"""
