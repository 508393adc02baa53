"""The README and the manual in docs/ name only what exists: every `mt/...`, `scripts/...` and
`tests/...` path, and every dotted `mt.x.y` name, a module or a name defined in one (read from
the source, so nothing is imported)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "scripts" / "README.md"]

# A path starts a word (not `runs/mt/...`, not a URL's tail, not `git show COMMIT:scripts/x.py`,
# a file of the past) and ends before punctuation.
PATH = re.compile(r"(?<![\w/.:-])((?:mt|scripts|tests)/[\w./-]*[\w/])")
DOTTED = re.compile(r"(?<![\w/.-])(mt(?:\.[A-Za-z_]\w*)+)")
SUFFIXES = {"yaml", "json", "py", "md", "org", "com", "txt", "log"}  # `mt.yaml`, `mt.example.org`


def named_paths(text: str) -> set[str]:
    return set(PATH.findall(text))


def dotted_names(text: str) -> set[str]:
    """`mt.x.y` names, less the file names that look like them (`mt.yaml`)."""
    return {n for n in DOTTED.findall(text) if n.rsplit(".", 1)[-1] not in SUFFIXES}


@cache
def defined(path: Path) -> dict[str, ast.AST | None]:
    """The names a module defines at its top level (functions, classes, assignments, imports),
    each with its class body where it is a class."""
    names: dict[str, ast.AST | None] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0]: None for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id: None for t in targets if isinstance(t, ast.Name)}
    return names


def class_members(node: ast.ClassDef) -> set[str]:
    members = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            members.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members.add(item.target.id)
        elif isinstance(item, ast.Assign):
            members |= {t.id for t in item.targets if isinstance(t, ast.Name)}
    return members


def module_file(dotted: str, root: Path = ROOT) -> Path | None:
    base = root.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def dotted_exists(name: str, root: Path = ROOT) -> bool:
    """`mt.a.b` is a module, or `mt.a.b.f` a name in module `mt.a.b`, or `mt.a.b.C.m` a member
    of its class `C`."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]), root)
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        names = defined(path)
        if rest[0] not in names:
            return False
        if len(rest) == 1:
            return True
        node = names[rest[0]]
        return len(rest) == 2 and isinstance(node, ast.ClassDef) and rest[1] in class_members(node)
    return False


def missing(text: str, root: Path = ROOT) -> list[str]:
    wrong = [p for p in sorted(named_paths(text)) if not (root / p).exists()]
    return wrong + [n for n in sorted(dotted_names(text)) if not dotted_exists(n, root)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_path_and_name_exists(page):
    assert page.is_file()
    assert missing(page.read_text(encoding="utf-8")) == []


def test_a_wrong_name_is_caught():
    text = (
        "See `mt/packing.py`, `mt/loss.py`, `scripts/bench_budget_resume.py`, `tests/nope.py`, "
        "`mt.decode.plan_for`, `mt.graphs`, `mt.decoding.search.nothing`, "
        "`mt.decoding.beam.Beam.nothing`; but `mt/decoding/`, `mt.decoding.beam.Beam.step`, "
        "`mt.data.batch.Batch`, `mt.cli`, `runs/mt/x`, `git show 0abc:scripts/old.py` and "
        "`mt.yaml` are fine."
    )
    assert missing(text) == [
        "mt/loss.py",
        "mt/packing.py",
        "scripts/bench_budget_resume.py",
        "tests/nope.py",
        "mt.decode.plan_for",
        "mt.decoding.beam.Beam.nothing",
        "mt.decoding.search.nothing",
        "mt.graphs",
    ]


def test_the_readme_shows_set_up_main_job_and_map_first():
    first_screen = "\n".join(
        ROOT.joinpath("README.md").read_text(encoding="utf-8").splitlines()[:60]
    )
    for needed in ("make install", "make test", "mt train --config base.yaml", "mt/decoding/"):
        assert needed in first_screen


def test_the_layers_described_are_the_layout_tests():
    """docs/layout.md numbers as many layers, and the README's map has as many rows, as
    tests/project/test_layout.py's LAYERS holds."""
    layout_test = ROOT.joinpath("tests", "project", "test_layout.py")
    tree = ast.parse(layout_test.read_text(encoding="utf-8"))
    (layers,) = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["LAYERS"]
    ]
    layout = ROOT.joinpath("docs", "layout.md").read_text(encoding="utf-8")
    numbered = re.findall(r"^(\d+)\. \*\*", layout, flags=re.M)
    assert numbered == [str(n) for n in range(1, len(layers.elts) + 1)]
    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    the_map = readme.split("## The map", 1)[1].split("| to find |", 1)[0]
    assert len(re.findall(r"^\| `mt/", the_map, flags=re.M)) == len(layers.elts)


def test_the_scripts_index_names_every_script():
    index = ROOT.joinpath("scripts", "README.md").read_text(encoding="utf-8")
    scripts = {f"scripts/{p.name}" for p in ROOT.joinpath("scripts").glob("*.py")}
    assert scripts <= named_paths(index)
