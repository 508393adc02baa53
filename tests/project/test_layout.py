"""The package's shape: its modules sit in layers and import only from their own layer or
below, with no circle, not even under `if TYPE_CHECKING:`; every module says its job in its
first docstring line and none is over 450 lines; `scripts/` use public names of `mt` only.
Imports are read from the source (every one, those inside functions too), not from what a
run happens to load."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mt"
LONGEST = 450  # lines a module may have

# From the bottom: what every layer shares, the data, the model and its checkpoint format,
# decoding, text (sentences and their layout around decoding), training (which validates by
# decoding), the exporters and the server, and the command line on top. A module may
# import from its own layer and those below it.
LAYERS = [
    {
        "mt",
        "mt.errors",
        "mt.messages",
        "mt.files",
        "mt.figures",
        "mt.run_folder",
        "mt.device",
        "mt.config",
    },
    {"mt.config_checks", "mt.config_file"},
    {"mt.data"},
    {"mt.model", "mt.packed_attention", "mt.row_linear", "mt.checkpoint", "mt.from_marian"},
    {"mt.decoding"},
    {"mt.text"},
    {"mt.formats"},
    {"mt.training"},
    {"mt.export", "mt.serve"},
    {"mt.cli", "mt.__main__"},
]


def imported_names(tree: ast.AST, package: str) -> set[str]:
    """Dotted names of what a module imports, `mt.x.y` or `mt.x.y.name`, with relative
    imports resolved against `package`, the module's own (`mt.data`); every import counts,
    those under `if TYPE_CHECKING:` too: a circle of annotations is still a circle."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(filter(None, [*parts, base]))
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package `root/mt` (dotted, `mt.data.store`) and the modules of it
    that it imports."""
    paths = {module_name(p, root): p for p in (root / "mt").rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for imported in imported_names(ast.parse(path.read_text(encoding="utf-8")), package):
            while imported and imported not in paths:  # mt.data.store.Split -> mt.data.store
                imported = imported.rpartition(".")[0]
            if imported:
                found.add(imported)
        graph[name] = found - {name}
    return graph


def layer(module: str) -> int:
    """The layer of a module: that of the longest prefix named in LAYERS (the package `mt`
    itself names only its __init__: a new top-level module must be placed)."""
    parts = module.split(".")
    for end in range(len(parts), 0 if module == "mt" else 1, -1):
        for index, members in enumerate(LAYERS):
            if ".".join(parts[:end]) in members:
                return index
    raise AssertionError(f"{module}: in no layer (add it to LAYERS)")


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
    (tmp_path / "mt" / "data").mkdir(parents=True)
    for name, text in {
        "mt/__init__.py": "",
        "mt/a.py": "from . import b\nfrom .data.c import thing\n",
        "mt/b.py": "def f():\n    import mt.data.c\n",  # a lazy import counts
        "mt/data/__init__.py": "",
        "mt/data/c.py": "import os\nfrom .. import a as alias\nfrom ..b import f\n",
        "mt/data/d.py": "if TYPE_CHECKING:\n    from . import c\n",
    }.items():
        (tmp_path / name).write_text(text)
    assert module_graph(tmp_path) == {
        "mt": set(),
        "mt.a": {"mt.b", "mt.data.c"},
        "mt.b": {"mt.data.c"},
        "mt.data": set(),
        "mt.data.c": {"mt.a", "mt.b"},
        "mt.data.d": {"mt.data.c"},  # an annotation's import counts too
    }


def test_every_module_has_a_layer_and_the_layers_are_ordered():
    assert layer("mt.config") < layer("mt.data.store") < layer("mt.model")
    assert layer("mt.decoding.search") < layer("mt.training.trainer") < layer("mt.cli")
    assert {layer(name) for name in module_graph(ROOT)} <= set(range(len(LAYERS)))


def test_no_import_circle_in_mt():
    assert cycles(module_graph(ROOT)) == []


def test_no_module_imports_from_a_layer_above_its_own():
    upward = {
        (name, dep)
        for name, deps in module_graph(ROOT).items()
        for dep in deps
        if layer(dep) > layer(name)
    }
    assert upward == set()


def test_every_module_states_its_job_and_is_at_most_450_lines():
    unsaid, long = set(), set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name != "__main__.py" and not ast.get_docstring(ast.parse(text)):
            unsaid.add(module_name(path, ROOT))
        if len(text.splitlines()) > LONGEST:
            long.add(module_name(path, ROOT))
    assert (unsaid, long) == (set(), set())


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


def test_the_tests_mirror_the_layers_and_no_test_file_is_over_450_lines():
    """tests/ holds no test file of its own, only a folder a layer (and helpers), and no
    Python file under it is over LONGEST lines."""
    tests = ROOT / "tests"
    assert not list(tests.glob("test_*.py"))
    long = [
        str(p.relative_to(ROOT))
        for p in tests.rglob("*.py")
        if len(p.read_text(encoding="utf-8").splitlines()) > LONGEST
    ]
    assert long == []
