"""`inspect` and `validate` on a multi-file skill (core/package.py)."""

from __future__ import annotations

import json

from deep_pipeline.cli import main
from tests.multi_world import GUIDE, SKILL


def _package(tmp_path, skill_text=SKILL):
    folder = tmp_path / "demo-skill"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text(skill_text, encoding="utf-8")
    (folder / "references" / "guide.md").write_text(GUIDE, encoding="utf-8")
    return folder


def test_inspect_json_lists_every_file_and_its_units(tmp_path, capsys):
    folder = _package(tmp_path)
    assert main(["inspect", str(folder), "--json"]) == 0
    units = json.loads(capsys.readouterr().out)
    assert list(dict.fromkeys(u["file"] for u in units)) == ["SKILL.md", "references/guide.md"]
    guide = [u for u in units if u["file"] == "references/guide.md"]
    assert [u["unit_id"] for u in guide] == ["references/guide.md#s01-tone", "references/guide.md#s02-format"]
    assert all(GUIDE[u["start"]:u["end"]] == u["text"] for u in guide)
    assert main(["inspect", str(folder), "--level", "paragraph", "--section", "references/guide.md#s02-format",
                 "--json"]) == 0
    assert [u["unit_id"] for u in json.loads(capsys.readouterr().out)] == ["references/guide.md#s02-format-p00"]
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "demo-skill: 5 section units in 2 files" and "-- references/guide.md" in out


def test_validate_warns_of_a_link_to_a_file_the_package_lacks(tmp_path, capsys):
    folder = _package(tmp_path, SKILL.replace("## Output", "See [forms](forms.md).\n\n## Output"))
    assert main(["validate", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "warning: SKILL.md links to forms.md, which is not in the package" in out
    assert "references/guide.md" not in out  # it exists: no warning
