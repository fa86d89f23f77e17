"""The runtime that turns an engine step into a Dagster run: the in-process driver, run
creation with an origin, the run tags, registration, the locks, the dead-run sweep, the
asset-step wrapper and the timeline logging. `defs/` holds only the Dagster definitions;
every private Dagster import is fenced in `runtime/dagster_private.py`.
"""
