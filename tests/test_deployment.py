"""deep_pipeline.yaml: what the deployment file may hold."""

from pathlib import Path

import pytest

from deep_pipeline.engine.settings import load_deployment
from deep_pipeline.errors import InputError


def test_a_pool_limit_in_the_deployment_file_is_refused_naming_where_the_limit_lives(tmp_path):
    path = tmp_path / "deep_pipeline.yaml"
    path.write_text("dimensions: default\nllm_pool_limit: 4\n")
    with pytest.raises(InputError) as info:
        load_deployment(path)
    message = str(info.value)
    assert message.startswith(f"{path}: llm_pool_limit:") and "\n" not in message
    assert "concurrency.pools.default_limit" in message


def test_the_shipped_deployment_file_loads():
    shipped = Path(__file__).resolve().parents[1] / "deep_pipeline.yaml"
    assert load_deployment(shipped).defaults["runner"] == "chat"
