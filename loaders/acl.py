"""Who may read what a load indexes: the ``acl`` of each passage.

- ``hopsearch index docs DIR --acl P …``: the principals of every file no sidecar covers.
- A sidecar ``.hopsearch-acl.yaml`` in a folder maps globs to principals (a list, or one string)::

      "*": [group:staff]                 # every file of this folder and below
      "*.xlsx": [group:finance]          # a pattern without / matches file names, at any depth
      "salaries/**": [group:hr]          # with /: the path below this folder (** any depth)
      "board/minutes-*.md": private      # admins only, whatever acl_default says

  How they combine: a sidecar covers its folder and everything below it, wherever a load starts (a folder
  loaded alone reads the sidecars of the folders above it too, so one file always gets one ACL). For a
  file, the nearest sidecar (deepest folder) with a matching pattern decides, and within one sidecar the
  last matching pattern wins; its principals replace (never add to) what sidecars further up or ``--acl``
  say — a folder can narrow what its parent allows. Files no pattern matches get ``--acl``; without
  ``--acl``, no ``acl`` (they read as the ``acl_default`` setting when searched).
- ``index jsonl``: a record's ``acl`` field (a string, comma-separated, or a list); ``index dpr``: an
  ``acl`` column after ``id text title`` (comma-separated). Without one, DPR and QA passages (public
  corpora) are ``public``; JSONL records have no ``acl``.

A principal is ``public``, ``user:<name>`` or ``group:<name>`` (:func:`~hopsearch.service.access.
document_principal`), or the word ``private``. A bad one in a sidecar stops the load before anything is
written (an error naming the file and line); in a record it rejects that record (a dead letter with its
line).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from hopsearch.service.access import PUBLIC, document_acl
from hopsearch.service.errors import InputError

SIDECAR = ".hopsearch-acl.yaml"
#: The ``acl`` of public corpora (DPR, QA contexts) loaded without one.
PUBLIC_ACL = (PUBLIC,)


def acl_value(value: Any) -> list[str]:
    """Return the ``acl`` of a record's field: a string (comma-separated principals) or a list of strings;
    ``ValueError`` saying what is wrong."""
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list):
        names = value
    else:
        raise ValueError(f"acl must be a string or a list of strings, not {type(value).__name__}")
    return document_acl(names)


def glob_matches(pattern: str, relative: PurePosixPath) -> bool:
    """Whether ``relative`` (a file's path below a sidecar's folder) matches ``pattern``: without ``/`` the
    file's name is matched; with ``/`` the whole path, segment by segment, ``**`` standing for any number of
    folders."""
    if "/" not in pattern:
        return fnmatch.fnmatchcase(relative.name, pattern)
    return _segments(pattern.strip("/").split("/"), list(relative.parts))


def _segments(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_segments(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _segments(pattern[1:], parts[1:])


@dataclass(frozen=True, slots=True)
class Sidecar:
    """One ``.hopsearch-acl.yaml``: its folder and its ``(pattern, acl)`` rules in file order."""

    folder: Path
    rules: tuple[tuple[str, tuple[str, ...]], ...]

    def acl_of(self, path: Path) -> tuple[str, ...] | None:
        """Return the ACL of the last rule matching ``path`` (a file below :attr:`folder`), or None."""
        relative = PurePosixPath(Path(os.path.relpath(path, self.folder)).as_posix())
        found: tuple[str, ...] | None = None
        for pattern, acl in self.rules:
            if glob_matches(pattern, relative):
                found = acl
        return found


def read_sidecar(path: Path) -> Sidecar:
    """Parse a sidecar; :class:`InputError` naming the file and line of anything wrong in it."""
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the ACL sidecar: {exc}", source=str(path)) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"the ACL sidecar is not valid YAML: {exc}", source=str(path), position=line) from exc
    if root is None:
        return Sidecar(path.parent, ())
    if not isinstance(root, yaml.MappingNode):
        raise InputError("an ACL sidecar maps globs to principals", source=str(path), position=root.start_mark.line + 1)
    rules: list[tuple[str, tuple[str, ...]]] = []
    for key, value in root.value:
        line = key.start_mark.line + 1
        if not isinstance(key, yaml.ScalarNode) or not str(key.value).strip():
            raise InputError("a rule's key is a glob (a string)", source=str(path), position=line)
        try:
            acl = acl_value(yaml.safe_load(yaml.serialize(value)))
        except ValueError as exc:
            raise InputError(
                f"rule {key.value!r}: {exc}", source=str(path), position=value.start_mark.line + 1
            ) from exc
        rules.append((str(key.value).strip(), tuple(acl)))
    return Sidecar(path.parent, tuple(rules))


class FolderAcls:
    """The ACL of each file of a load (the module docstring says how sidecars and ``--acl`` combine).
    Sidecars are read once per folder, the folders above the load's root included."""

    def __init__(self, default: Iterable[str] | None = None) -> None:
        self.default = tuple(document_acl(default)) if default else None
        self._sidecars: dict[Path, Sidecar | None] = {}

    def sidecar(self, folder: Path) -> Sidecar | None:
        if folder not in self._sidecars:
            path = folder / SIDECAR
            self._sidecars[folder] = read_sidecar(path) if path.is_file() else None
        return self._sidecars[folder]

    def check(self, folders: Iterable[Path]) -> None:
        """Read the sidecars of ``folders`` and of every folder above them now (a bad one stops the load
        before anything is written)."""
        for folder in folders:
            for above in (folder, *folder.parents):
                self.sidecar(above)

    def acl_of(self, path: Path) -> tuple[str, ...] | None:
        """Return the ACL of the file ``path`` (absolute), or None (no sidecar matches it and no ``--acl``)."""
        for folder in path.parents:
            sidecar = self.sidecar(folder)
            if sidecar is not None and (found := sidecar.acl_of(path)) is not None:
                return found
        return self.default

    @property
    def sidecars(self) -> list[str]:
        """The sidecars read so far."""
        return sorted(str(s.folder / SIDECAR) for s in self._sidecars.values() if s is not None)
