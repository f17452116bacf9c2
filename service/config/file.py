"""The TOML settings file named by ``HOPSEARCH_CONFIG``.

Its keys are the settings' names, the environment variables' without ``HOPSEARCH_``; like the variables,
they are read whatever their case (``embedder``, ``EMBEDDER``). They stand at the top of the file or in
a ``[hopsearch]`` table (the convention of files shared with other tools), or both; one setting given
twice (``embedder`` and ``[hopsearch] EMBEDDER``) is refused, and so is a file that does not exist: a
file named and not read would leave every setting at its default without a word.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hopsearch.service.errors import ConfigError

#: The table whose keys are settings too.
TABLE = "hopsearch"


def read_config_file(path: Path) -> dict[str, Any]:
    """Return the file's settings by their names as written (a ``[hopsearch]`` table's keys among them), other
    keys and tables included for the caller to warn of; :class:`ConfigError` of one line naming the file
    where it is missing, unreadable, no TOML, or sets one setting twice."""
    if not path.exists():
        raise ConfigError(f"HOPSEARCH_CONFIG names {path}, which does not exist")
    if not path.is_file():
        raise ConfigError(f"HOPSEARCH_CONFIG names {path}, which is not a file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} (HOPSEARCH_CONFIG): {exc}") from exc
    found: dict[str, Any] = {}
    seen: dict[str, str] = {}  # folded name → where it was set
    tables = [key for key, value in data.items() if key.lower() == TABLE and isinstance(value, Mapping)]
    entries = [(key, value, key) for key, value in data.items() if key not in tables]
    entries += [(key, value, f"[{table}] {key}") for table in tables for key, value in data[table].items()]
    for key, value, where in entries:
        before = seen.setdefault(key.lower(), where)
        if before != where:
            raise ConfigError(f"{path}: {before} and {where} set the same setting; keep one")
        found[key] = value
    return found


def settings_values(found: Mapping[str, Any]) -> dict[str, Any]:
    """Return the file's values under the settings' own (lower-case) names."""
    return {key.lower(): value for key, value in found.items()}
