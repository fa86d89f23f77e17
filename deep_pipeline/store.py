"""The compile store: one folder per compile, every step's output written atomically.

Layout of `<root>/<compile key>/`, `<root>` being `$DEEP_PIPELINE_STORE`, else
`$DAGSTER_HOME/compiles` (the paths are named in engine/compile_dir.py; the README's
"The compile store" lists the same):

    compile.json                    identity: hashes, task, effective config (written last)
    input/skill/                    S_fast, copied
    input/bundle.json               the task bundle as given
    lock                            driver lock: one driver (CLI, `compile` job) per compile
    step.lock                       step lock: one engine step of the compile at a time
    budget_exhausted.json           the input rollouts stopped at the budget (then: finalize)
    traces/<batch>/<trace_id>.json  every trace (batch "input", "section-i00", ...)
    traces/<batch>/batch.json       the batch's commit, written after its traces
    raw/<batch>/<n>/                archived raw agent output of rollout n (size-capped)
    agents/<marker>.json            agent processes a subprocess runner has running
    matrices/<level>-m<NN>/         plan.json (written first), column-<dimension>.json,
                                    matrix.json (the matrix's commit)
    iterations/<level>-i<NN>/       edit.json, candidate/ (the package), candidate.json,
                                    rollouts.json, comparison.json, decision.json (commit)
    llm/cache/<hash>.json           model answers (crash-safe resume, replay)
    llm/calls.jsonl                 accounting: one line per real model call
    final/skill/, report.json       S_final and the report (report.json: finalized)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def require_writable_folder(path: Path, what: str) -> None:
    """A folder we are about to write into: made if missing, else refused in one line (InputError)."""
    from deep_pipeline.errors import InputError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{path}: {what} is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A real probe: permission bits say nothing to root, nor about a read-only mount.
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"{path}: {what} cannot be written ({exc.strerror or exc})") from None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """A file's sha256, read in chunks: a large file of a package is never held in memory whole."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once at import: setting the umask is process-wide, so never toggle it under threads.
_UMASK = _read_umask()


# Temp files and folders of the atomic writes below are named `.<name>.<random>.tmp`.
TEMP_SUFFIX = ".tmp"


def remove_orphaned_temps(root: Path, packages: tuple[Path, ...] = ()) -> int:
    """Remove the temp files and folders a killed writer left under `root`; returns how many.

    Only call it while nothing else writes there (a step holds the compile's step lock).
    `packages` are copied skill folders: a `.x.tmp` inside one is the skill's own file.
    """
    root = Path(root)
    removed: list[Path] = []
    for path in sorted(root.rglob(f".*{TEMP_SUFFIX}")) if root.is_dir() else ():
        inside = [*packages, *removed]  # sorted: a folder comes before what it holds
        if any(path.is_relative_to(p) and path != p for p in inside):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return len(removed)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder, fsync, rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; records are ordinary files
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    # newline="" semantics: the text is written exactly, CRLF kept.
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, value: BaseModel | Any) -> None:
    if isinstance(value, BaseModel):
        data = value.model_dump(mode="json")
    else:
        data = value
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_model(path: Path, model: type[M]) -> M:
    return model.model_validate(read_json(path))


def package_files(root: Path) -> list[Path]:
    """Relative paths of every regular file in a package, sorted (symlinks followed)."""
    root = Path(root)
    files = [p.relative_to(root) for p in root.rglob("*") if p.is_file()]
    return sorted(files, key=lambda p: p.as_posix())


def package_hash(root: Path) -> str:
    """sha256 over sorted relative paths and their files' sha256 (SPEC §2)."""
    digest = hashlib.sha256()
    for rel in package_files(root):
        digest.update(rel.as_posix().encode("utf-8"))
        digest.update(b"\0")
        digest.update(sha256_file(Path(root) / rel).encode("ascii"))
        digest.update(b"\n")
    return digest.hexdigest()


def _fsync_tree(root: Path) -> None:
    for path in sorted(Path(root).rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        elif path.is_dir():
            _fsync_dir(path)
    _fsync_dir(Path(root))


def atomic_copy_tree(src: Path, dst: Path, replace: dict[str, bytes] | None = None) -> None:
    """Copy a package to `dst` through a temp folder and one rename.

    `replace` maps relative paths to new contents (a candidate's SKILL.md).
    An existing `dst` is left as it is: a finished copy is the step's record.
    """
    dst = Path(dst)
    if dst.exists():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=TEMP_SUFFIX, dir=dst.parent))
    try:
        shutil.rmtree(tmp)
        shutil.copytree(src, tmp, symlinks=False)
        for rel, data in (replace or {}).items():
            (tmp / rel).write_bytes(data)
        _fsync_tree(tmp)  # an existing copy is trusted as finished: its files must be on disk
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(dst.parent)
