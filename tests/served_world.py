"""The compile world of tests/compile_world.py served over HTTP, for compiles run by other
processes (the CLI, a daemon, a Dagster run worker), where the in-process scripted
litellm provider cannot reach.

The judge and editor are `openai/judge` and `openai/editor` on a ScriptedOpenAIServer;
`answer_with(world)` answers every request from the world, `KillPoint` does too but can
hold one request open (where a test kills or races the driver).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import yaml

from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.engine.steps import run_steps, run_step
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.scripted_openai_server import ScriptedOpenAIServer

CLI = Path(sys.executable).parent / "deep-pipeline"


class OpenAIRequest:
    """The scripted world's view of an OpenAI request body (as ScriptedRequest is in-process)."""

    def __init__(self, body: dict):
        self.messages = body["messages"]
        self.schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
        self.text = "\n".join(str(m.get("content") or "") for m in self.messages)
        self.unit_ids = list((self.schema or {}).get("required", []))

    @property
    def role(self) -> str:
        return "editor" if "new_text" in (self.schema or {}).get("properties", {}) else "judge"


def answer_with(world: World):
    def turn(body: dict) -> dict:
        request = OpenAIRequest(body)
        answer = world.editor(request) if request.role == "editor" else world.judge(request)
        return {"content": json.dumps(answer)}

    return turn


def one_edit_world() -> World:
    """One low cell: a compile of two matrices (section, paragraph) and one iteration."""
    return World(low={("s02-steps", "clarity"): 2})


class KillPoint:
    """Answers from the world, but holds the first request of the armed role open.

    A held request is never answered (the world does not count it: a call lost with
    its driver) unless `answer_held`, when it gets its answer once released.
    """

    def __init__(self, world: World, answer_held: bool = False):
        self.answer = answer_with(world)
        self.answer_held = answer_held
        self.armed: str | None = None
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def arm(self, role: str) -> None:
        self.arrived.clear()
        self.release.clear()
        self.armed = role

    def __call__(self, body: dict) -> dict:
        role = OpenAIRequest(body).role
        with self._lock:
            hold, self.armed = (self.armed == role), (None if self.armed == role else self.armed)
        if hold:
            self.arrived.set()
            self.release.wait(60)
            if not self.answer_held:
                return {"status": 503, "error": "the caller is gone"}
        return self.answer(body)


def reference(tmp_path: Path, scripted_llm) -> tuple[list, str, int]:
    """The kill world, uninterrupted, on the plain driver: (decisions, S_final's SKILL.md, model calls)."""
    install_world(scripted_llm, one_edit_world())
    skill, bundle = make_inputs(tmp_path / "ref")
    record = register_compile(tmp_path / "ref" / "store", skill, bundle, effective_config(load_deployment(), CONFIG))
    ctx = CompileHandle.open(tmp_path / "ref" / "store", record.key)
    report = run_steps(ctx, run_step)
    decisions = [(d.level, str(d.coordinate), d.accepted, d.reason) for d in report.decisions]
    return decisions, (Path(report.final_skill_dir) / "SKILL.md").read_text(), len(scripted_llm.requests)


def served_overrides(server: ScriptedOpenAIServer) -> dict:
    """A replayed compile whose judge and editor are `server`."""
    return {"judge_model": "openai/judge", "judge_api_base": server.api_base, "editor_model": "openai/editor",
            "editor_api_base": server.api_base, "runner": "replay", "rollouts": 2}


def cli_env(home: Path) -> dict[str, str]:
    """The environment of a CLI process on `home`, with a dummy key for the served models."""
    env = {**os.environ, "DAGSTER_HOME": str(home), "OPENAI_API_KEY": "sk-test-dummy-key"}
    env.pop("DEEP_PIPELINE_STORE", None)
    return env


@dataclass
class ServedCompile:
    server: ScriptedOpenAIServer
    skill: Path
    bundle: Path
    config: dict  # the compile's overrides, as written to config_path
    config_path: Path
    env: dict[str, str]

    @property
    def compile_args(self) -> list[str]:
        """`deep-pipeline compile`'s arguments (without the program)."""
        return ["compile", str(self.skill), "--task", str(self.bundle), "--config", str(self.config_path)]


@contextmanager
def served_compile(tmp_path: Path, home: Path, answer) -> Iterator[ServedCompile]:
    """Inputs, a compile.yaml and a CLI environment on `home` for a compile whose models `answer` serves."""
    skill, bundle = make_inputs(tmp_path)
    with ScriptedOpenAIServer([answer] * 50) as server:
        config = served_overrides(server)
        (tmp_path / "compile.yaml").write_text(yaml.safe_dump(config))
        yield ServedCompile(server, skill, bundle, config, tmp_path / "compile.yaml", cli_env(home))
