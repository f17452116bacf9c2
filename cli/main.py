"""The ``hopsearch`` command group."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="hopsearch")
def main() -> None:
    """hopsearch: multi-hop question answering over Elasticsearch."""
