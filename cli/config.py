"""``hopsearch config show|reference``: the effective settings, and the Markdown reference for README."""

from __future__ import annotations

from typing import Any

import click
from pydantic import SecretStr

from hopsearch.cli.render import echo_json
from hopsearch.service.config.settings import MASK, Settings, load_settings, shown_url


def reference_markdown() -> str:
    """One table row per setting, generated from the settings object (README's configuration section)."""
    lines = ["| environment variable | default | description |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "(computed)" if name in ("cache_dir", "state_dir", "es_url", "llm_base_url") else "[]"
        else:
            default = "" if field.default is None else f"`{field.default}`"
        description = (field.description or "").replace("|", "\\|")
        lines.append(f"| `HOPSEARCH_{name.upper()}` | {default} | {description} |")
    return "\n".join(lines) + "\n"


def _shown(value: Any) -> Any:
    """Return a setting's value as printed: secrets and the passwords inside URLs masked."""
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value if isinstance(value, int | float | bool | type(None)) else shown_url(str(value))


@click.group("config")
def config() -> None:
    """Inspect the settings (environment ``HOPSEARCH_*`` and the TOML file named by HOPSEARCH_CONFIG)."""


@config.command("show")
def show() -> None:
    """Print the effective settings as JSON (secrets masked)."""
    settings = load_settings()
    echo_json({name: _shown(getattr(settings, name)) for name in Settings.model_fields})


@config.command("reference")
def reference() -> None:
    """Print the configuration reference as a Markdown table."""
    click.echo(reference_markdown(), nl=False)
