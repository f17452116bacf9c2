"""``hopsearch serve``: the HTTP service under uvicorn (uvloop and httptools where installed).

``--workers N`` runs N service processes on one port (uvicorn's supervisor binds the socket and
restarts a worker that dies). They share nothing but Elasticsearch: each builds its app from the
settings (:func:`~hopsearch.service.api.app.app_from_settings`), opens its own clients, and keeps its
own limits and metrics (``/_metrics`` names the process in ``hopsearch_process_info{pid=…}``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import HopsearchError

if TYPE_CHECKING:
    from fastapi import FastAPI

#: The app factory each worker imports (workers are separate processes: they cannot share an object).
APP_FACTORY = "hopsearch.service.api.app:app_from_settings"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def stored_keys(settings: Settings) -> bool:
    """Whether ``<prefix>-keys`` holds a key (False where Elasticsearch cannot say: refuse to open up)."""
    from hopsearch.service.auth.keys import KeyStore
    from hopsearch.service.store import Store

    async def ask() -> bool:
        async with await Store.connect(settings) as store:
            return await KeyStore.of(store, settings.api_key_cache_s).any_keys()

    try:
        return asyncio.run(ask())
    except HopsearchError:
        return False


@click.command()
@click.option("--host", default=None, help="Address to listen on (default: settings.api_host, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default: settings.api_port, 9280).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Service processes on the port; they share keys' requests per minute (a file `serve` makes) and "
    "Elasticsearch; questions in flight and metrics are per process.",
)
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--access-log/--no-access-log", default=False, help="Log every request (slower).")
def serve(host: str | None, port: int | None, workers: int, log_level: str, access_log: bool) -> None:
    """Serve the plugin-style HTTP API (`GET /`, `POST /{index}/_retrieve`, `POST /{index}/_ask`, ...)."""
    import uvicorn

    from hopsearch.service.api import create_app

    overrides: dict[str, object] = {}
    if host:
        overrides["api_host"] = host
    if port:
        overrides["api_port"] = port
    settings = load_settings(**overrides)
    if not settings.api_keys and not is_loopback(settings.api_host) and not stored_keys(settings):
        raise click.ClickException(
            f"refusing to listen on {settings.api_host} without API keys: set HOPSEARCH_API_KEYS or store one "
            "(hopsearch keys create NAME --admin)"
        )
    plural = f" ({workers} worker processes)" if workers > 1 else ""
    click.echo(f"hopsearch serving on http://{settings.api_host}:{settings.api_port}{plural}", err=True)
    target: FastAPI | str = APP_FACTORY
    if workers == 1:
        target = create_app(settings)
    else:  # each worker reads the settings again: hand it the options given here the way a child sees them
        os.environ["HOPSEARCH_API_HOST"] = settings.api_host
        os.environ["HOPSEARCH_API_PORT"] = str(settings.api_port)
        os.environ["HOPSEARCH_API_SHARED_LIMITS_FILE"] = shared_limits_file()
    uvicorn.run(
        target,
        factory=workers > 1,
        workers=workers if workers > 1 else None,
        host=settings.api_host,
        port=settings.api_port,
        log_level=log_level,
        access_log=access_log,
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=max(1, round(settings.api_graceful_timeout_s)),
    )


def shared_limits_file() -> str:
    """Make a new file the workers share requests per minute through, removed when ``serve`` exits.

    See :class:`~hopsearch.service.api.limits.SharedWindows`.
    """
    import atexit
    import tempfile

    from hopsearch.service.api.limits import SharedWindows

    handle, path = tempfile.mkstemp(prefix="hopsearch-limits-")
    os.close(handle)
    SharedWindows.create(path)
    atexit.register(lambda: Path(path).unlink(missing_ok=True))
    return path
