"""The package's shape: imports between `mt/` modules form no circle and never reach up to
the command line, no function of `mt/` is over 60 lines, and `scripts/` use public names of
`mt` only. Imports are read from the source (every one, those inside functions too), not
from what a run happens to load; imports under `if TYPE_CHECKING:` are annotations and do
not count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mt"
TOP = {"cli", "__main__"}  # the command line: it dispatches to the modules, none calls back

LONGEST = 60  # lines a function of mt/ may have


def imported_names(tree: ast.AST, package: str | None) -> set[str]:
    """Dotted names of what a module imports, `mt.x` or `mt.x.name`; relative imports are
    resolved against `package` (the module's own package, "mt")."""
    names = set()
    typing_only = {  # `if TYPE_CHECKING:` imports are annotations, not dependencies
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [package, base]))
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def module_graph(folder: Path) -> dict[str, set[str]]:
    """Each module of the package in `folder` and the modules of it that it imports."""
    modules = {path.stem for path in folder.glob("*.py")}
    graph = {}
    for name in modules:
        tree = ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))
        parts = [n.split(".") for n in imported_names(tree, folder.name)]
        deps = {p[1] for p in parts if p[0] == folder.name and len(p) > 1 and p[1] in modules}
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of a graph: one per strongly connected component of more than one module
    (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_circle_finder_finds_circles_and_only_them():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


def test_the_graph_reads_every_import_form(tmp_path):
    (tmp_path / "mt").mkdir()
    for name, text in {
        "a": "from . import b\nfrom .c import thing\n",
        "b": "def f():\n    import mt.c\n",  # a lazy import counts
        "c": "import os\nfrom mt import a as alias\n",
    }.items():
        (tmp_path / "mt" / f"{name}.py").write_text(text)
    assert module_graph(tmp_path / "mt") == {"a": {"b", "c"}, "b": {"c"}, "c": {"a"}}


def test_no_import_circle_in_mt():
    assert cycles(module_graph(PACKAGE)) == []


def test_no_module_imports_the_command_line():
    upward = {
        (name, dep)
        for name, deps in module_graph(PACKAGE).items()
        for dep in deps & TOP
        if name not in TOP
    }
    assert upward == set()


def test_no_function_in_mt_is_longer_than_60_lines():
    long = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and node.end_lineno - node.lineno + 1 > LONGEST:
                long.add(f"{path.stem}.{node.name}")
    assert long == set()


def mt_names(tree: ast.AST) -> set[str]:
    """Dotted names of `mt` a script imports or reaches through an imported module's
    attributes (`checkpoint._x` after `from mt import checkpoint`)."""
    local = {}  # name bound in the script -> what of mt it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                local[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    names = {full for full in local.values() if full}
    for node in ast.walk(tree):
        parts = []
        while isinstance(node, ast.Attribute):  # mt.cli._x: Attribute(Attribute(Name))
            parts.insert(0, node.attr)
            node = node.value
        if parts and isinstance(node, ast.Name):
            names.add(".".join([local.get(node.id) or node.id, *parts]))
    return {name for name in names if name.split(".")[0] == "mt"}


def private(name: str) -> bool:
    return any(p.startswith("_") and not p.endswith("__") for p in name.split(".")[1:])


def test_private_names_are_found_however_a_script_reaches_them():
    tree = ast.parse(
        "import mt.cli\nfrom mt import checkpoint as ck, data\nfrom mt.cli import _a, b\n"
        "ck._c()\nmt.cli._d\ndata.read\nmt.__file__\n"
    )
    found = {name for name in mt_names(tree) if private(name)}
    assert found == {"mt.cli._a", "mt.checkpoint._c", "mt.cli._d"}


def test_scripts_import_no_private_name_of_mt():
    found = set()
    for script in sorted((ROOT / "scripts").glob("*.py")):
        names = mt_names(ast.parse(script.read_text(encoding="utf-8")))
        found |= {(script.relative_to(ROOT).as_posix(), n) for n in names if private(n)}
    assert found == set()
