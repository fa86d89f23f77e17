"""Every repository path the docs name exists: README.md, docs/*.md and the docstrings of
deep_pipeline/**.py. A newcomer follows these names to the code, so a file that moved must
take its mentions with it.

What counts as a path: a token of `/`-separated names that starts at a top folder of the
repository (`deep_pipeline/engine/steps.py`, `tests/test_batch.py`, `deploy/k8s/`) or at a
folder of the package (`engine/steps.py`, `defs/assets/`, resolved under deep_pipeline/),
ending in a source-like suffix or in none (a folder or a script such as `.ci/run`), and a
test module or benchmark named alone (`test_batch.py`, `bench_gate.py`). Paths
with placeholders or globs (`traces/<batch>/`, `llm/prompts/*.md`) describe the compile
store or a family of files and are left alone, as are paths of other projects
(`dagster/_core/...`). A markdown link's target is resolved against the page it is on.
A dotted name in backticks that starts at the package (`deep_pipeline.definitions`,
`core.policy`, `core.policy.next_action`) must name a module and, after it, names defined
in it (read with ast; nothing is imported).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "deep_pipeline"
TOP = ("deep_pipeline", "tests", "benchmarks", "deploy", "docs", "dagster_home", ".ci")
SUFFIXES = {"py", "md", "yaml", "yml", "toml", "json", "txt", "sh", "cfg", "ini"}
NOT_DOTTED = SUFFIXES | {"jsonl", "html", "png", "lock", "tmp"}


def package_folders() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir()
                  if p.is_dir() and not p.name.startswith(("_", ".")))


def path_pattern() -> re.Pattern:
    roots = "|".join(re.escape(r) for r in (*TOP, *package_folders()))
    # not inside a longer path (`/`, `.`, `$X/`, `{workdir}/`, `<compile>/` before it) and not
    # cut short before a placeholder, a glob or a further segment
    return re.compile(rf"(?<![\w./<>{{}}$~-])((?:{roots})(?:/[\w.-]+)+/?)(?![\w<*{{\[/.-])")


def dotted_pattern() -> re.Pattern:
    heads = "|".join(re.escape(r) for r in ("deep_pipeline", *package_folders()))
    return re.compile(rf"`((?:{heads})(?:\.\w+)+)`")


LINK = re.compile(r"\]\(([^)\s]+)\)")
# a test module or benchmark named by its file name alone lives in its folder
BARE = re.compile(r"(?<![\w./-])((?:test|bench)_\w+\.py)\b")
BARE_HOME = {"test": "tests", "bench": "benchmarks"}


def sources() -> list[tuple[str, int, str, Path]]:
    """(where, line, text, folder a relative link starts from) for every doc text."""
    out = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        where = str(md.relative_to(ROOT))
        for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            out.append((where, n, line, md.parent))
    for py in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(py.read_text(encoding="utf-8"))
        where = str(py.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and node.body:
                    first = node.body[0].lineno
                    for k, line in enumerate(doc.splitlines()):
                        out.append((where, first + k, line, py.parent))
    return out


def path_exists(token: str) -> bool:
    token = token.rstrip("/")
    head = token.split("/", 1)[0]
    if head in TOP and (ROOT / token).exists():
        return True
    return (PACKAGE / token).exists()


def is_checked_path(token: str) -> bool:
    last = token.rstrip("/").rsplit("/", 1)[-1]
    if "." not in last.lstrip("."):
        return True
    return last.rsplit(".", 1)[-1] in SUFFIXES


def module_names(path: Path) -> dict[str, ast.AST | None]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return body_names(tree.body)


def body_names(body: list[ast.stmt]) -> dict[str, ast.AST | None]:
    names: dict[str, ast.AST | None] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
    return names


def dotted_resolves(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "deep_pipeline":
        parts = parts[1:]
    folder = PACKAGE
    while parts and (folder / parts[0]).is_dir():
        folder, parts = folder / parts[0], parts[1:]
    if not parts:
        return True
    module = folder / f"{parts[0]}.py"
    if not module.is_file():  # a name the package's __init__ defines (`cli.entry`)
        module, parts = folder / "__init__.py", [folder.name, *parts]
        if not module.is_file():
            return False
    names, node = module_names(module), None
    for part in parts[1:]:
        if part not in names:
            return False
        node = names[part]
        names = body_names(node.body) if isinstance(node, ast.ClassDef) else {}
    return True


def missing_names() -> list[str]:
    paths, dotted = path_pattern(), dotted_pattern()
    missing = []
    for where, line, text, folder in sources():
        for token in paths.findall(text):
            if is_checked_path(token) and not path_exists(token):
                missing.append(f"{where}:{line}: {token}")
        for name in BARE.findall(text):
            if not (ROOT / BARE_HOME[name.split("_", 1)[0]] / name).is_file():
                missing.append(f"{where}:{line}: {name}")
        for target in LINK.findall(text):
            target = target.split("#", 1)[0]
            if target and "://" not in target and not target.startswith("mailto:"):
                if not (folder / target).exists():
                    missing.append(f"{where}:{line}: link {target}")
        for name in dotted.findall(text):
            if name.rsplit(".", 1)[-1] not in NOT_DOTTED and not dotted_resolves(name):
                missing.append(f"{where}:{line}: {name}")
    return missing


def test_every_path_the_docs_name_exists():
    missing = missing_names()
    assert not missing, "named in the docs but not in the repository:\n" + "\n".join(missing)


def test_the_check_finds_paths_in_each_kind_of_source():
    # A check that matched nothing would pass whatever moved: it must see the README's
    # SPEC table, a docs page, a docstring and a dotted name.
    paths, dotted = path_pattern(), dotted_pattern()
    seen = {(where.split("/")[0], kind) for where, _, text, _ in sources()
            for kind, found in (("path", paths.findall(text)), ("dotted", dotted.findall(text)))
            if found}
    assert {("README.md", "path"), ("docs", "path"), ("deep_pipeline", "path"),
            ("README.md", "dotted")} <= seen
    assert path_exists("engine/steps.py") and path_exists("deep_pipeline/engine/steps.py")
    assert not path_exists("engine/no_such_module.py")
    assert dotted_resolves("core.policy.next_action") and not dotted_resolves("core.policy.nothing")
