"""The layout's rules, read from the source with ``ast`` (no Elasticsearch, nothing imported).

- every function and method in ``service/``, ``loaders/``, ``cli/`` is at most 80 lines, counted from its
  ``def`` line to its last line (decorators not counted);
- no import cycle among their modules: every ``import`` statement anywhere in a module counts (inside
  functions and under ``TYPE_CHECKING`` too), ``from pkg import mod`` is an edge to the submodule when
  ``mod`` is one, and a package's ``__init__`` is a module of its own;
- imports flow ``cli → loaders → service``, never back;
- ``service/``'s root holds the kernel only (at most 5 modules, ``__init__`` counted); ``service/api/``'s root at
  most 10 besides its ``__init__``;
- ``service/api/`` has a folder per front end (a wing): no wing imports another, ``middleware/`` (plumbing)
  imports no wing, and of ``api/``'s root modules only ``app.py`` (which mounts them) does; no module that
  defines a ``router`` imports another that does;
- every module path ``docs/architecture.md`` names exists, and its tables of packages and of which package
  imports which are the code's;
- a store's settings are read only in ``service/store/``, its client only there and in ``service/retrieval/``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("service", "loaders", "cli")
MAX_LINES = 80
#: a layer may import the layers after it in this order, never one before it
ORDER = {"cli": 0, "loaders": 1, "service": 2}


def module_name(path: Path, root: Path = ROOT) -> str:
    """``service/outlines/store.py`` → ``hopsearch.service.outlines.store`` (``__init__.py``: the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["hopsearch", *parts])


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the three layers by its dotted name."""
    found: dict[str, Path] = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path, root)] = path
    return found


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from … import`` names (relative imports resolved against ``name``)."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _known(target: str, known: Mapping[str, Path]) -> str | None:
    """``target`` or its nearest enclosing module among ``known`` (``a.b.Name`` → ``a.b``)."""
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports, from every import statement in its file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(name, path, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            hit = _known(target, known)
            if hit is not None and hit != name:
                found.add(hit)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle as its path (``a → b → … → a``), or None; an iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path: list[str] = [start]
        stack: list[Iterator[str]] = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def layer_of(name: str) -> str:
    return name.split(".")[1]


def long_functions(root: Path = ROOT) -> list[str]:
    """``path:line name (N lines)`` for every function or method over :data:`MAX_LINES`."""
    found = []
    for path in modules(root).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_over_80_lines() -> None:
    assert long_functions() == [], "split these into named steps"


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    """Imports against the flow ``cli → loaders → service``."""
    return [
        f"{name} imports {target}"
        for name, targets in sorted(graph.items())
        for target in sorted(targets)
        if ORDER[layer_of(target)] < ORDER[layer_of(name)]
    ]


def test_imports_flow_from_cli_to_loaders_to_service() -> None:
    assert upward_imports(import_graph()) == []


def test_service_root_holds_the_kernel_only() -> None:
    root_modules = sorted(p.name for p in (ROOT / "service").glob("*.py"))
    assert len(root_modules) <= 5, root_modules
    api_root = sorted(p.name for p in (ROOT / "service" / "api").glob("*.py") if p.name != "__init__.py")
    assert len(api_root) <= 10, api_root


API = "hopsearch.service.api"
PLUMBING = "middleware"


def wing_of(name: str, known: Mapping[str, Path]) -> str | None:
    """The folder of ``service/api/`` that holds module ``name`` (``es``, ``openai``, …, ``middleware``), or None."""
    parts = name.split(".")
    if not name.startswith(API + "."):
        return None
    return parts[3] if len(parts) > 4 or known[name].name == "__init__.py" else None


def wing_imports(graph: Mapping[str, set[str]], known: Mapping[str, Path]) -> list[str]:
    """Imports that break the wings rule (see the module docstring)."""
    found = []
    for name, targets in sorted(graph.items()):
        if not name.startswith(API):
            continue
        mine = wing_of(name, known)
        for target in sorted(targets):
            theirs = wing_of(target, known)
            if theirs is None or theirs == mine or (theirs == PLUMBING and mine is not None):
                continue
            if mine is None and name in (API, f"{API}.app"):
                continue  # the app mounts every wing
            found.append(f"{name} imports {target}")
    return found


def routers(root: Path = ROOT) -> set[str]:
    """The modules that define a module-level ``router`` (route modules)."""
    found = set()
    for name, path in modules(root).items():
        for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "router" for t in node.targets):
                found.add(name)
    return found


def test_no_wing_imports_another_and_no_route_module_another() -> None:
    known = modules()
    graph = import_graph()
    wings = {wing_of(name, known) for name in known} - {None}
    assert {"es", "openai", "mcp", "proxy", PLUMBING} <= wings
    assert wing_imports(graph, known) == []
    route_modules = routers()
    assert len(route_modules) >= 5
    assert [f"{a} imports {b}" for a in sorted(route_modules) for b in sorted(graph[a] & route_modules)] == []


def unit_of(name: str, known: Mapping[str, Path]) -> str:
    """The row a module belongs to in the doc's tables: ``cli``, ``loaders``, ``root`` (``service/``'s own
    modules), a package of ``service/`` by its folder (``retrieval``), ``api`` (its root) or ``api/<wing>``."""
    parts = name.split(".")
    if parts[1] != "service":
        return parts[1]
    if len(parts) == 2 or (len(parts) == 3 and known[name].name != "__init__.py"):
        return "root"
    if parts[2] != "api":
        return parts[2]
    wing = wing_of(name, known)
    return f"api/{wing}" if wing else "api"


def unit_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    units: dict[str, set[str]] = {unit_of(name, known): set() for name in known}
    for name, targets in import_graph(root).items():
        mine = unit_of(name, known)
        units[mine] |= {unit_of(target, known) for target in targets} - {mine}
    return units


def documented_imports(text: str) -> dict[str, set[str]]:
    """The rows of the doc's "Which package imports which" table: each package named in the first cell →
    the names in the second (``service/retrieval/`` → ``retrieval``; ``service/api/es/`` → ``api/es``)."""
    section = text.split("## Which package imports which", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        imported = {name.strip() for name in cells[1].split(",") if name.strip() and name.strip() != "—"}
        for path in re.findall(r"`([^`]+)`", cells[0]):
            unit = "root" if path == "service/*.py" else path.removeprefix("service/").strip("/")
            table[unit] = imported
    return table


def test_the_architecture_doc_tables_are_the_code() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    actual = unit_graph()
    assert documented_imports(text) == actual
    listed = text.split("## Packages of `service/`", 1)[1].split("\n## ", 1)[0]
    packages = set(re.findall(r"^\| `service/([\w/]+)/` \|", listed, flags=re.M))
    real = {p.parent.relative_to(ROOT / "service").as_posix() for p in (ROOT / "service").glob("*/__init__.py")}
    real |= {
        p.parent.relative_to(ROOT / "service").as_posix() for p in (ROOT / "service" / "api").glob("*/__init__.py")
    }
    assert packages == real


def test_every_module_path_in_the_architecture_doc_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"\b(?:service|loaders|cli)/[\w/]*\w(?:\.py)?\b", text))
    dotted = set(re.findall(r"\bhopsearch\.(?:service|loaders|cli)(?:\.\w+)*", text))
    assert len(paths) + len(dotted) >= 20, "the doc names the modules it describes"
    known = modules()
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    missing += sorted(d for d in dotted if d not in known)
    assert missing == []


#: where a store's ``settings`` and ``client`` may be read (each component is handed the settings it uses;
#: Elasticsearch's client stays in the store, and in retrieval, which runs its ``_msearch``)
STORE_INSIDES = {"settings": ("service/store/",), "client": ("service/store/", "service/retrieval/")}


def store_insides(root: Path = ROOT) -> list[str]:
    """List each read of ``store.settings`` or ``store.client`` (``self.store``, ``self._store`` too) where
    :data:`STORE_INSIDES` does not allow it, as ``path:line store.attr``."""
    found: list[str] = []
    for path in modules(root).values():
        where = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Attribute) or node.attr not in STORE_INSIDES:
                continue
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name in ("store", "_store") and not where.startswith(STORE_INSIDES[node.attr]):
                found.append(f"{where}:{node.lineno} {name}.{node.attr}")
    return sorted(found)


def test_the_store_keeps_its_settings_and_client() -> None:
    assert store_insides() == []


def test_the_checks_see_what_they_check(tmp_path: Path) -> None:
    """The graph and the cycle search on a tree made here: a cycle through ``from pkg import mod`` inside
    a function and a relative import is found, with its path; a long function is found."""
    (tmp_path / "service" / "pkg").mkdir(parents=True)
    (tmp_path / "loaders").mkdir()
    (tmp_path / "cli").mkdir()
    (tmp_path / "service" / "__init__.py").write_text("")
    (tmp_path / "service" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "service" / "pkg" / "a.py").write_text("def f():\n    from hopsearch.service.pkg import b\n")
    (tmp_path / "service" / "pkg" / "b.py").write_text("from . import c\n")
    (tmp_path / "service" / "pkg" / "c.py").write_text("from .a import f\n" + "def g():\n" + "    x = 1\n" * 80)
    (tmp_path / "loaders" / "x.py").write_text("from hopsearch.cli import y\n")
    (tmp_path / "cli" / "y.py").write_text("import hopsearch.service.pkg.a\n")
    graph = import_graph(tmp_path)
    assert graph["hopsearch.service.pkg.a"] == {"hopsearch.service.pkg.b"}
    assert graph["hopsearch.loaders.x"] == {"hopsearch.cli.y"}
    assert graph["hopsearch.cli.y"] == {"hopsearch.service.pkg.a"}
    assert find_cycle(graph) == [
        "hopsearch.service.pkg.a",
        "hopsearch.service.pkg.b",
        "hopsearch.service.pkg.c",
        "hopsearch.service.pkg.a",
    ]
    assert long_functions(tmp_path) == ["service/pkg/c.py:2 g (81 lines)"]
    assert upward_imports(graph) == ["hopsearch.loaders.x imports hopsearch.cli.y"]
    del graph["hopsearch.service.pkg.c"]
    assert find_cycle(graph) is None
