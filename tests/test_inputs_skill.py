"""load_skill: what a usable skill package is, and the one-line refusals (SPEC §2)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from deep_pipeline.errors import InputError
from deep_pipeline.inputs.skill import load_skill
from deep_pipeline.store import sha256_bytes

FIXTURE = Path(__file__).parent / "fixtures" / "skills" / "pdf-report"
CORPUS = Path("/work/shared/corpus/skills")
GOOD = "---\nname: demo-skill\ndescription: Does the demo task.\n---\n\n# Demo\n\nDo it.\n"


def make_skill(root: Path, content: str | bytes = GOOD, name: str = "demo-skill") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    data = content.encode("utf-8") if isinstance(content, str) else content
    (folder / "SKILL.md").write_bytes(data)
    return folder


def refusal(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_skill(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_fixture_skill_loads_with_hashes_and_front_matter():
    skill = load_skill(FIXTURE)
    assert skill.name == "pdf-report"
    assert skill.description.startswith("Turn a CSV")
    assert skill.front_matter["license"] == "Apache-2.0"
    assert skill.warnings == []
    assert skill.skill_text == (FIXTURE / "SKILL.md").read_text(encoding="utf-8")
    assert skill.skill_sha256 == sha256_bytes((FIXTURE / "SKILL.md").read_bytes())
    assert len(skill.package_hash) == 64


def test_package_hash_changes_with_any_file_but_not_with_the_folder_location(tmp_path):
    first = load_skill(FIXTURE).package_hash
    copy = tmp_path / "pdf-report"
    shutil.copytree(FIXTURE, copy)
    assert load_skill(copy).package_hash == first
    (copy / "scripts" / "report.py").write_text("print('changed')\n")
    assert load_skill(copy).package_hash != first


@pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus of real skills not available")
def test_every_real_skill_in_the_corpus_loads():
    for folder in sorted(CORPUS.iterdir()):
        skill = load_skill(folder)
        assert skill.name == folder.name
        assert skill.description.strip()


def test_crlf_skill_keeps_its_line_endings(tmp_path):
    text = GOOD.replace("\n", "\r\n")
    skill = load_skill(make_skill(tmp_path, text))
    assert skill.skill_text == text and skill.name == "demo-skill"


def test_long_description_is_a_warning_not_an_error(tmp_path):
    text = f"---\nname: demo-skill\ndescription: {'x' * 1100}\n---\n# Demo\n"
    skill = load_skill(make_skill(tmp_path, text))
    assert any("1100 characters" in w and "1024" in w for w in skill.warnings)


def test_name_differing_from_folder_is_a_warning(tmp_path):
    skill = load_skill(make_skill(tmp_path, GOOD, name="other-folder"))
    assert skill.warnings == ["name 'demo-skill' differs from the folder name 'other-folder'"]


def test_missing_folder_and_file_instead_of_folder(tmp_path):
    assert "no such skill folder" in refusal(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    assert "not a folder" in refusal(tmp_path / "file")


def test_no_skill_md_names_a_wrongly_cased_file(tmp_path):
    folder = tmp_path / "demo-skill"
    folder.mkdir()
    assert "no SKILL.md" in refusal(folder)
    (folder / "skill.md").write_text(GOOD)
    assert "found skill.md" in refusal(folder)


def test_skill_md_that_is_a_folder(tmp_path):
    folder = tmp_path / "demo-skill"
    (folder / "SKILL.md").mkdir(parents=True)
    assert "SKILL.md: is a folder" in refusal(folder)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty"),
        (b"  \n\n", "empty"),
        (b"---\nname: demo-skill\ndescription: caf\xe9\n---\n", "not UTF-8: byte 0xe9 at byte offset 37"),
        (b"---\nname: demo-skill\ndescription: a\x00b\n---\n", "NUL byte at byte offset 35"),
        ("\ufeff" + GOOD, "byte order mark"),
        ("# Demo\n\nNo front matter.\n", "no YAML front matter"),
        ("---\nname: demo-skill\ndescription: x\n# Demo\n", "never closed"),
        ("---\nname: demo-skill\ndescription: [unclosed\n---\n", "line 3: front matter is not valid YAML"),
        ("---\n- name\n- description\n---\n", "front matter is a list; expected a mapping"),
        ("---\n---\n# Demo\n", "front matter is empty"),
        ("---\ndescription: x\n---\n", "no 'name'"),
        ("---\nname: demo-skill\n---\n", "no 'description'"),
        ("---\nname: 42\ndescription: x\n---\n", "'name' is an integer; expected a string"),
        ("---\nname: demo-skill\ndescription:\n---\n", "'description' is empty; expected a string"),
        ("---\nname: demo-skill\ndescription: '   '\n---\n", "description is blank"),
    ],
)
def test_malformed_skill_md_is_refused_with_the_reason(tmp_path, content, expected):
    message = refusal(make_skill(tmp_path, content))
    assert "demo-skill/SKILL.md" in message
    assert expected in message


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Demo-Skill", "lowercase"),
        ("demo_skill", "lowercase"),
        ("-demo", "start or end"),
        ("demo-", "start or end"),
        ("demo--skill", "'--'"),
        ("a" * 65, "65 characters"),
        ("''", "is empty"),
    ],
)
def test_names_breaking_the_agent_skills_rule_are_errors(tmp_path, name, expected):
    message = refusal(make_skill(tmp_path, f"---\nname: {name}\ndescription: x\n---\n"))
    assert "Agent Skills naming rule" in message and expected in message


def test_symlink_leaving_the_package_is_refused(tmp_path):
    folder = make_skill(tmp_path)
    secret = tmp_path / "outside.txt"
    secret.write_text("not part of the skill")
    os.symlink(secret, folder / "notes.txt")
    assert "notes.txt: symlink leaves the package" in refusal(folder)


def test_symlinked_folder_leaving_the_package_is_refused(tmp_path):
    folder = make_skill(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", folder / "refs")
    assert "refs: symlink leaves the package" in refusal(folder)


def test_symlink_loop_and_dangling_symlink_are_refused(tmp_path):
    folder = make_skill(tmp_path)
    os.symlink(folder / "loop", folder / "loop")
    assert "loop: symlink loops" in refusal(folder)
    (folder / "loop").unlink()
    os.symlink(folder / "missing.txt", folder / "dangling")
    assert "dangling: symlink points nowhere" in refusal(folder)


def test_symlink_inside_the_package_is_fine(tmp_path):
    folder = make_skill(tmp_path)
    (folder / "docs").mkdir()
    (folder / "docs" / "a.md").write_text("a")
    os.symlink(folder / "docs" / "a.md", folder / "alias.md")
    assert load_skill(folder).name == "demo-skill"
