"""Settings checked for a person: names that are no setting, and values a setting does not take.

:func:`~hopsearch.service.config.settings.load_settings` reads the environment and the file named by
``HOPSEARCH_CONFIG`` and passes what it found here (this module reads neither). Names are matched as
the settings match them, whatever their case. A ``HOPSEARCH_*`` variable or a file key that names no
setting is otherwise silently ignored (a typo such as ``HOPSEARCH_EMBEDER`` leaves the default in
force): each is a warning naming the closest setting. A
value a setting refuses is one line per setting (where it was set, the value, what the setting
takes) instead of pydantic's report.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

ENV_PREFIX = "HOPSEARCH_"
#: ``HOPSEARCH_*`` variables that are not settings: the file's name and the test suite's own.
NOT_SETTINGS = frozenset({"HOPSEARCH_CONFIG"})
NOT_SETTINGS_PREFIXES = ("HOPSEARCH_TEST_",)


def closest(name: str, known: Iterable[str]) -> str | None:
    """Return the known name ``name`` most likely misspells, if any is close."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_variables(names: Iterable[str], fields: Collection[str]) -> list[str]:
    """Return a warning for each ``HOPSEARCH_*`` name (matched as the settings match them, ignoring case)
    that is no setting, with the closest setting's variable."""
    warnings = []
    for name in sorted(names):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NOT_SETTINGS or upper.startswith(NOT_SETTINGS_PREFIXES):
            continue
        if upper[len(ENV_PREFIX) :].lower() in fields:
            continue
        near = closest(upper[len(ENV_PREFIX) :].lower(), fields)
        hint = _hint(ENV_PREFIX + near.upper() if near else None)
        warnings.append(f"environment variable {name} is not a setting; {hint}")
    return warnings


def unknown_keys(keys: Iterable[str], fields: Collection[str], file: str) -> list[str]:
    """Return a warning for each key of the settings file that is no setting (matched as the settings match
    them, ignoring case), with the closest setting (a variable's name, ``HOPSEARCH_EMBEDDER``, is the
    setting's name without its prefix)."""
    warnings = []
    for key in keys:
        name = key.lower()
        if name in fields:
            continue
        bare = name.removeprefix(ENV_PREFIX.lower())
        near = bare if bare in fields else closest(name, fields)
        warnings.append(f"{file}: key {key!r} is not a setting; {_hint(near)}")
    return warnings


def _hint(near: str | None) -> str:
    return f"did you mean {near}?" if near else "`hopsearch config reference` lists them"


def bad_values(
    errors: Sequence[Mapping[str, Any]],
    where: Callable[[str], tuple[str, str]],
    shown: Callable[[str, Any], str],
) -> str:
    """One line per setting pydantic refused: ``where`` gives the name it was set under (the variable,
    the file key) and where (`` in <file>`` or nothing), ``shown`` renders its value safely (secrets
    masked)."""
    lines: dict[str, str] = {}
    for error in errors:
        loc = error.get("loc") or ("settings",)
        field = str(loc[0])
        if field in lines:
            continue
        allowed = str(error.get("msg", "not allowed"))
        for prefix, plain in (("Input should be", "must be"), ("Value error, ", ""), ("Assertion failed, ", "")):
            if allowed.startswith(prefix):
                allowed = plain + allowed[len(prefix) :]
        item = "".join(f"[{part}]" for part in loc[1:])
        name, origin = where(field)
        lines[field] = f"{name}{item}={shown(field, error.get('input'))}{origin}: {allowed}"
    return "\n".join(f"bad setting {line}" for line in lines.values())
