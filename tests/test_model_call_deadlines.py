"""The agent's deadline and the models' per-call timeouts count only the model's own time
(SPEC §9, issue 21 items 10, 11, 17 and 28): the compiler's start-up, a queue for the
local model's one slot and a hung request are the machinery's, never the agent's timeout."""

from __future__ import annotations

import json
import subprocess
import time

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import StepContext
from deep_pipeline.engine.settings import effective_config, load_deployment
from tests.compile_world import MARK, World
from tests.served_world import CLI, OpenAIRequest, answer_with, served_compile


def agent_or_world(world: World, candidate_s: float):
    """The judge and editor from `world`; the agent answers at once on S_fast, in `candidate_s` on an edit."""
    world_answer = answer_with(world)

    def turn(body: dict) -> dict:
        if body.get("response_format"):
            return world_answer(body)
        if MARK in body["messages"][0]["content"]:
            time.sleep(candidate_s)
        return {"content": "- shipped the parser"}

    return turn


def test_a_resumed_cli_compile_counts_no_start_up_against_a_two_second_rollout_timeout(tmp_path):
    # Issue 21 item 10: the first model call of a fresh process pays litellm's import (4-5 s
    # here); it is not the agent's time, so S_fast's answers at once are traces and only the
    # slow candidates are timeouts: the reference's decisions (test_rollouts_chat_timeout).
    world = World(low={("s01-when-to-use", "clarity"): 2})
    home = tmp_path / "home"
    with served_compile(tmp_path, home, agent_or_world(world, 4.0)) as served:
        config = {**served.config, "runner": "chat", "rollout_timeout_s": 2, "agent_model": "openai/agent",
                  "agent_api_base": served.server.api_base}
        # Registered here, run by a fresh process: nothing there has imported litellm yet.
        record = register_compile(home / "compiles", served.skill, served.bundle,
                                  effective_config(load_deployment(), config))
        done = subprocess.run([str(CLI), "resume", record.key, "--quiet"], env=served.env, capture_output=True,
                              text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    ctx = StepContext.open(home / "compiles", record.key)
    assert [t.error_category for t in ctx.cdir.traces("input")] == [None, None]
    report = json.loads((ctx.cdir.path / "report.json").read_text())
    assert [d["reason"] for d in report["decisions"]] == ["runtime_regressed:timeout"] * 2
