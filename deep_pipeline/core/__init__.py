"""The pure core: every rule of SPEC.md, with no dagster, litellm, subprocess or disk I/O."""
