"""The compile store's atomic writes."""

from __future__ import annotations

import os
import stat

from deep_pipeline.store import atomic_copy_tree, atomic_write_text, package_hash


def test_atomic_write_leaves_no_temp_file_and_ordinary_permissions(tmp_path):
    target = tmp_path / "a" / "record.json"
    atomic_write_text(target, "one\r\n")
    atomic_write_text(target, "two\r\n")
    assert target.read_bytes() == b"two\r\n"  # exact bytes, CRLF kept
    assert [p.name for p in target.parent.iterdir()] == ["record.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_copy_tree_replaces_only_what_it_is_told_and_keeps_a_finished_copy(tmp_path):
    src = tmp_path / "src"
    (src / "scripts").mkdir(parents=True)
    (src / "SKILL.md").write_text("old")
    (src / "scripts" / "run.sh").write_text("echo hi")
    atomic_copy_tree(src, tmp_path / "dst", replace={"SKILL.md": b"new"})
    assert (tmp_path / "dst" / "SKILL.md").read_text() == "new"
    assert (tmp_path / "dst" / "scripts" / "run.sh").read_text() == "echo hi"
    before = package_hash(tmp_path / "dst")
    atomic_copy_tree(src, tmp_path / "dst", replace={"SKILL.md": b"other"})  # exists: it is the record
    assert package_hash(tmp_path / "dst") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]


def test_orphaned_temps_of_a_killed_writer_are_removed_but_a_package_keeps_its_own(tmp_path):
    import tempfile

    from deep_pipeline.store import remove_orphaned_temps

    record = tmp_path / "iterations" / "section-i00" / "decision.json"
    atomic_write_text(record, "{}\n")
    # What a kill between mkstemp/mkdtemp and the rename leaves behind.
    fd, orphan = tempfile.mkstemp(prefix=".decision.json.", suffix=".tmp", dir=record.parent)
    os.close(fd)
    half_copy = tempfile.mkdtemp(prefix=".candidate.", suffix=".tmp", dir=record.parent)
    (tmp_path / half_copy / "SKILL.md").write_text("half")
    package = tmp_path / "input" / "skill"
    package.mkdir(parents=True)
    (package / ".notes.tmp").write_text("the skill's own file")

    assert remove_orphaned_temps(tmp_path, packages=(package,)) == 2
    assert sorted(p.name for p in record.parent.iterdir()) == ["decision.json"]
    assert (package / ".notes.tmp").read_text() == "the skill's own file"
