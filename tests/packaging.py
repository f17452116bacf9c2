"""What the package is made of, for the packaging tests: the folders setup.py installs as
``hopsearch.<folder>`` with their files and modules, and the parts of docker/Dockerfile the tests run (the
final stage's ENV, extra pip packages, HEALTHCHECK and CMD), read from the files themselves so that the
image, the wheel and the installed-package test cannot drift."""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]]  # (INSTRUCTION, arguments), continuation lines joined

    def args_of(self, instruction: str) -> list[str]:
        return [args for name, args in self.instructions if name == instruction]


@dataclass(frozen=True)
class Runtime:
    """What the final stage runs: its environment, the packages it adds beside the wheel, the health
    check and the command (both exec-form argument lists)."""

    env: dict[str, str]
    extra_packages: list[str]
    healthcheck: list[str]
    cmd: list[str]


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, args = line.partition(" ")
            out.append((name.upper(), args.strip()))
    return out


def stages(text: str | None = None) -> list[Stage]:
    found: list[Stage] = []
    for name, args in instructions(DOCKERFILE.read_text() if text is None else text):
        if name == "FROM":
            parts = args.split()
            found.append(Stage(parts[0], parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None, []))
        else:
            found[-1].instructions.append((name, args))
    return found


def runtime(text: str | None = None) -> Runtime:
    final = stages(text)[-1]
    env: dict[str, str] = {}
    for args in final.args_of("ENV"):
        for pair in shlex.split(args):
            key, _, value = pair.partition("=")
            env[key] = value
    extra: list[str] = []
    for args in final.args_of("RUN"):
        for command in args.split("&&"):
            words = shlex.split(command)
            if words[:3] == ["pip", "install", "--no-deps"]:
                extra += words[3:]
    [health] = final.args_of("HEALTHCHECK")
    [cmd] = final.args_of("CMD")
    return Runtime(env, extra, json.loads(health.split(" CMD ", 1)[1]), json.loads(cmd))


def package_folders(tree: Path = ROOT) -> tuple[str, ...]:
    """The folders setup.py installs as ``hopsearch.<folder>`` (its ``FOLDERS``)."""
    for node in ast.parse((tree / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["FOLDERS"]:
            folders: tuple[str, ...] = ast.literal_eval(node.value)
            return folders
    raise AssertionError("setup.py defines no FOLDERS")


def source_files(tree: Path) -> list[str]:
    """Files of the package folders, relative to ``tree`` (no caches)."""
    return sorted(
        path.relative_to(tree).as_posix()
        for folder in package_folders(tree)
        for path in (tree / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def module_names(tree: Path) -> list[str]:
    names = []
    for relative in source_files(tree):
        if relative.endswith(".py"):
            parts = relative[: -len(".py")].split("/")
            names.append(".".join(["hopsearch", *(parts[:-1] if parts[-1] == "__init__" else parts)]))
    return names
