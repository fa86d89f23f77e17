"""Inputs that used to get through, hang or read without end are refused in one line, exit 2,
nothing written (SPEC §2): an empty body, folder links that lead
back up, a package too large, special files as the bundle, files that cannot be read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import yaml

from deep_pipeline.cli import main
from deep_pipeline.store import atomic_copy_tree, package_hash
from tests.compile_world import CONFIG, make_inputs

REPO = Path(__file__).resolve().parent.parent
BODILESS = "---\nname: demo-skill\ndescription: Write a short status update.\n---\n"


def written(tmp: Path) -> set[Path]:
    return {p for p in tmp.rglob("*") if "inputs" not in p.relative_to(tmp).parts}


def refused(capsys, argv: list[str], tmp: Path, *expected: str) -> str:
    """Exit 2, one line naming what was expected, nothing written outside the inputs."""
    before = written(tmp)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("deep-pipeline: error: ") and "Traceback" not in err, err
    for part in expected:
        assert part in err, err
    assert written(tmp) == before
    return err


def compile_argv(tmp: Path, skill: Path, bundle: Path) -> list[str]:
    config = tmp / "inputs" / "compile.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    return ["compile", str(skill), "--task", str(bundle), "--config", str(config), "--quiet"]


@pytest.fixture
def inputs(env):
    """A good skill and bundle under <tmp>/inputs; DAGSTER_HOME and the store not yet made."""
    (env / "home").rmdir()
    skill, bundle = make_inputs(env / "inputs")
    return env, skill, bundle


# ---------------------------------------------------------------- item 22: no body


@pytest.mark.parametrize("body", ["", "\n", "\n  \n\t\n"])
def test_a_skill_without_a_body_is_refused_by_validate_and_compile(inputs, capsys, scripted_llm, body):
    tmp, skill, bundle = inputs
    (skill / "SKILL.md").write_text(BODILESS + body)
    refused(capsys, ["validate", str(skill)], tmp, "SKILL.md has no body to compile", str(skill / "SKILL.md"))
    refused(capsys, compile_argv(tmp, skill, bundle), tmp, "SKILL.md has no body to compile")


# ---------------------------------------------------------------- item 23: links leading back up


@pytest.mark.parametrize("where", ["itself", "its parent", "a sibling that links back"])
def test_a_folder_link_leading_back_up_is_refused_naming_the_link(inputs, capsys, scripted_llm, where):
    tmp, skill, bundle = inputs
    (skill / "refs").mkdir()
    if where == "itself":
        link = skill / "self"
        os.symlink(".", link)
    elif where == "its parent":
        link = skill / "refs" / "up"
        os.symlink("..", link)
    else:
        (skill / "more").mkdir()
        os.symlink("../more", skill / "refs" / "more")
        link = skill / "more" / "refs"
        os.symlink("../refs", link)
    refused(capsys, ["validate", str(skill)], tmp, f"{link}: symlink loops back")
    refused(capsys, compile_argv(tmp, skill, bundle), tmp, f"{link}: symlink loops back")


# ---------------------------------------------------------------- item 24: size


def test_a_package_past_the_size_limit_is_refused_in_one_line(inputs, capsys, scripted_llm, monkeypatch):
    tmp, skill, bundle = inputs
    with open(skill / "data.bin", "wb") as handle:
        handle.truncate(101 * 2**20)  # sparse: 101 MB without using the disk
    refused(capsys, ["validate", str(skill)], tmp, str(skill), "more than the 100 MB")
    refused(capsys, compile_argv(tmp, skill, bundle), tmp, "more than the 100 MB")
    monkeypatch.setenv("DEEP_PIPELINE_PACKAGE_MAX_MB", "200")
    assert main(["validate", str(skill)]) == 0
    monkeypatch.setenv("DEEP_PIPELINE_PACKAGE_MAX_MB", "lots")
    refused(capsys, ["validate", str(skill)], tmp, "DEEP_PIPELINE_PACKAGE_MAX_MB='lots'")


def test_hashing_and_copying_a_package_streams_its_files(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "SKILL.md").write_text("x")
    (package / "big.bin").write_bytes(os.urandom(2**20) * 24)  # 24 MB
    tracemalloc.start()
    try:
        package_hash(package)
        atomic_copy_tree(package, tmp_path / "copy", replace={"SKILL.md": b"y"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MB for a 24 MB file"
    assert package_hash(tmp_path / "copy") != package_hash(package)
    assert (tmp_path / "copy" / "big.bin").read_bytes() == (package / "big.bin").read_bytes()


# ---------------------------------------------------------------- item 30: special files


def test_a_fifo_as_the_bundle_or_a_device_as_the_config_is_refused_not_waited_on(inputs):
    tmp, skill, bundle = inputs
    fifo = tmp / "inputs" / "bundle.fifo"
    os.mkfifo(fifo)
    cli = [sys.executable, "-c", "import sys; from deep_pipeline.cli import main; sys.exit(main())"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for argv in (["validate", str(skill), "--bundle", str(fifo)], compile_argv(tmp, skill, fifo)):
        run = subprocess.run([*cli, *argv], capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 2, run.stderr
        assert run.stderr.count("\n") == 1 and f"{fifo}: a named pipe (FIFO)" in run.stderr
    argv = compile_argv(tmp, skill, bundle)
    config = Path(argv[argv.index("--config") + 1])
    config.unlink()
    os.symlink("/dev/zero", config)
    run = subprocess.run([*cli, *argv], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and f"{config}: a device file" in run.stderr, run.stderr
    assert not (tmp / "home").exists() and not (tmp / "store").exists()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_bundle_linked_to_a_device_is_refused_unread(inputs, capsys, scripted_llm, device):
    tmp, skill, _ = inputs
    bundle = tmp / "inputs" / "device.json"
    os.symlink(device, bundle)
    refused(capsys, ["validate", str(skill), "--bundle", str(bundle)], tmp, f"{bundle}: a device file")
    refused(capsys, compile_argv(tmp, skill, bundle), tmp, f"{bundle}: a device file")


def test_a_json_input_past_its_size_cap_is_refused_without_being_read_whole(tmp_path):
    from deep_pipeline.errors import InputError
    from deep_pipeline.inputs.jsonfile import read_bytes

    path = tmp_path / "bundle.json"
    path.write_bytes(b"[" + b"0," * 2**20 + b"0]")
    assert read_bytes(path, limit=4 * 2**20) == path.read_bytes()
    with pytest.raises(InputError, match=f"^{path}: larger than 1 MB; expected a file of at most that size$"):
        read_bytes(path, limit=2**20)


# ---------------------------------------------------------------- item 31: unreadable input, durations


def run_without_root_reads(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a process whose root has lost the power to read any file (CAP_DAC_*), so a
    mode-000 file is unreadable to it as to any user."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to make a file unreadable to the process")
    drop = "-dac_override,-dac_read_search"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", sys.executable, "-c",
                           "import sys; from deep_pipeline.cli import main; sys.exit(main())", *argv],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


@pytest.mark.parametrize("unreadable", ["SKILL.md", "notes.txt", "folder", "config"])
def test_unreadable_input_is_bad_input_exit_2_nothing_written(inputs, unreadable):
    tmp, skill, bundle = inputs
    argv = compile_argv(tmp, skill, bundle)
    target = {"config": tmp / "inputs" / "compile.yaml", "folder": skill / "refs"}.get(unreadable, skill / unreadable)
    if unreadable == "folder":
        target.mkdir()
        (target / "a.md").write_text("a")
    target.chmod(0)
    for command in ([["validate", str(skill)]] if unreadable != "config" else []) + [argv]:
        run = run_without_root_reads(command, tmp)
        assert run.returncode == 2, run.stderr
        assert run.stderr.count("\n") == 1 and f"{target}: cannot read: Permission denied" in run.stderr, run.stderr
    assert not (tmp / "home").exists() and not (tmp / "store").exists()


@pytest.mark.parametrize("value", [1e308, float("inf"), 7 * 24 * 3600 + 1])
def test_a_duration_setting_past_a_week_is_refused(inputs, capsys, scripted_llm, value):
    tmp, skill, bundle = inputs
    argv = compile_argv(tmp, skill, bundle)
    Path(argv[argv.index("--config") + 1]).write_text(yaml.safe_dump({**CONFIG, "rollout_timeout_s": value}))
    refused(capsys, argv, tmp, "compile.yaml: rollout_timeout_s: Input should be less than or equal to 604800")


def test_a_verifier_timeout_past_a_week_is_refused():
    from deep_pipeline.engine.evaluation import evaluate
    from deep_pipeline.errors import InputError

    with pytest.raises(InputError, match="--verifier-timeout: 1e[+]308; expected .* at most 604800"):
        evaluate(None, verifier_timeout_s=1e308)


def test_a_read_only_store_is_refused_before_dagster_home_is_initialised(inputs, capsys, scripted_llm, monkeypatch):
    from tests.test_cli_machine_faults import tmpfs

    tmp, skill, bundle = inputs
    with tmpfs(tmp / "store", "ro,size=1m") as store:
        refused(capsys, compile_argv(tmp, skill, bundle), tmp / "inputs", f"{store}: compile store cannot be written")
    assert not (tmp / "home" / "dagster.yaml").exists()
    assert not any((tmp / "home").iterdir()) if (tmp / "home").exists() else True


def _used(folder: Path) -> int:
    info = os.statvfs(folder)
    return (info.f_blocks - info.f_bfree) * info.f_frsize


@pytest.mark.parametrize("share", [0.75, 0.8, 0.85])
def test_a_dagster_home_filling_up_mid_compile_ends_in_the_one_line_alone(tmp_path, monkeypatch, capsys, scripted_llm,
                                                                          share):
    """Dagster reports each log line it could not store straight to stderr (SQL, parameters:
    4-6 lines); the command's one line must stand alone."""
    from tests.compile_world import World, install_world
    from tests.test_cli_machine_faults import compile_args, tmpfs

    args = compile_args(tmp_path)
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    with tmpfs(tmp_path / "roomy", "size=50m") as roomy:
        monkeypatch.setenv("DAGSTER_HOME", str(roomy))
        install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
        assert main(args) == 0
        needed = _used(roomy)
    capsys.readouterr()
    with tmpfs(tmp_path / "home", f"size={int(needed * share) // 1024}k") as home:
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store2"))
        scripted_llm.reset()
        install_world(scripted_llm, World(low={("s02-steps", "clarity"): 2}))
        assert main(args) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("deep-pipeline: step failed: "), err
        assert "no space left on device" in err and "run the same command again" in err, err
