"""A skill whose lines end in CRLF or CR only compiles to its end, S_final keeping them (SPEC §4).

A whole compile through the plain driver: the scripted world accepts one edit of the
"Steps" section; everything outside that edit must come back byte for byte.
"""

from __future__ import annotations

import pytest

from deep_pipeline.engine import steps
from deep_pipeline.engine.compiles import register_compile
from deep_pipeline.engine.context import CompileHandle
from deep_pipeline.engine.settings import effective_config, load_deployment
from deep_pipeline.store import sha256_bytes
from tests.compile_world import CONFIG, MARK, SKILL, World, install_world, make_inputs


@pytest.mark.parametrize("ending", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_a_crlf_or_cr_skill_compiles_to_its_end_with_s_final_byte_identical_outside_the_edit(
        ending, env, scripted_llm):
    text = SKILL.replace("\n", ending)
    install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
    skill, bundle = make_inputs(env / "in", text)
    (skill / "SKILL.md").write_bytes(text.encode("utf-8"))  # exactly these bytes, no translation
    record = register_compile(env / "store", skill, bundle, effective_config(load_deployment(), CONFIG))

    report = steps.run_steps(CompileHandle.open(env / "store", record.key), steps.run_step)
    assert steps.run_steps(CompileHandle.open(env / "store", record.key), steps.run_step) == report  # resume: same end

    assert report.status == "completed"
    assert [d.reason for d in report.decisions] == ["target_improved_without_runtime_regression"]
    final = (env / "store" / record.key / "final" / "skill" / "SKILL.md").read_bytes()
    original = text.encode("utf-8")
    head, tail = original.split(b"## Steps" + ending.encode())[0], original.split(b"## Output")[1]
    assert final.startswith(head + b"## Steps" + ending.encode()) and final.endswith(b"## Output" + tail)
    edited = final[len(head):-len(tail)]
    assert MARK.encode() in edited
    assert edited.replace(ending.encode(), b"").count(b"\n") + edited.replace(ending.encode(), b"").count(b"\r") == 0
    assert report.final_skill_sha256 == sha256_bytes(final)
    assert (env / "store" / record.key / "final" / "skill" / "notes.txt").read_bytes() == (skill / "notes.txt").read_bytes()
