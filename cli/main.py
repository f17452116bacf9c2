"""The ``hopsearch`` command group. Subcommands live in their own modules and are registered here."""

from __future__ import annotations

from typing import Any

import click

from hopsearch.cli.admin import doctor, init, search, traces
from hopsearch.cli.agents import mcp
from hopsearch.cli.ask import ask
from hopsearch.cli.config import config
from hopsearch.cli.demo import demo
from hopsearch.cli.es import es
from hopsearch.cli.evaluate import evaluate
from hopsearch.cli.groups import groups
from hopsearch.cli.index import index
from hopsearch.cli.indices import indices, loads
from hopsearch.cli.keys import keys
from hopsearch.cli.llm import llm
from hopsearch.cli.logs import configure
from hopsearch.cli.outlines import outlines
from hopsearch.cli.serve import serve
from hopsearch.service.errors import ConfigError


class _Commands(click.Group):
    """The command group; bad settings (or a missing local resource) end any command with their own
    message and exit status 1, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Commands)
@click.version_option(package_name="hopsearch")
@click.option("-v", "--verbose", count=True, help="Log at INFO level; -vv at DEBUG (library retries too).")
def main(verbose: int) -> None:
    """hopsearch: multi-hop question answering over Elasticsearch."""
    configure(verbose)


main.add_command(es)
main.add_command(llm)
main.add_command(ask)
main.add_command(demo)
main.add_command(config)
main.add_command(init)
main.add_command(search)
main.add_command(traces)
main.add_command(doctor)
main.add_command(evaluate)
main.add_command(serve)
main.add_command(index)
main.add_command(indices)
main.add_command(keys)
main.add_command(loads)
main.add_command(outlines)
main.add_command(groups)
main.add_command(mcp)
