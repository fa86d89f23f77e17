"""`python -m deep_pipeline`: the `deep-pipeline` command, for an environment whose scripts are not on PATH."""

from deep_pipeline.cli import entry

if __name__ == "__main__":
    entry()
