"""``hopsearch serve``: the HTTP service under uvicorn (uvloop and httptools where installed)."""

from __future__ import annotations

import ipaddress

import click

from hopsearch.service.settings import load_settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.option("--host", default=None, help="Address to listen on (default: settings.api_host, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default: settings.api_port, 9280).")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--access-log/--no-access-log", default=False, help="Log every request (slower).")
def serve(host: str | None, port: int | None, log_level: str, access_log: bool) -> None:
    """Serve the plugin-style HTTP API (`GET /`, `POST /{index}/_retrieve`, `POST /{index}/_ask`, ...)."""
    import uvicorn

    from hopsearch.service.api import create_app

    overrides: dict[str, object] = {}
    if host:
        overrides["api_host"] = host
    if port:
        overrides["api_port"] = port
    settings = load_settings(**overrides)
    if not settings.api_keys and not is_loopback(settings.api_host):
        raise click.ClickException(
            f"refusing to listen on {settings.api_host} without API keys: set HOPSEARCH_API_KEYS"
        )
    click.echo(f"hopsearch serving on http://{settings.api_host}:{settings.api_port}", err=True)
    uvicorn.run(
        create_app(settings),
        host=settings.api_host,
        port=settings.api_port,
        log_level=log_level,
        access_log=access_log,
        lifespan="on",
        server_header=False,
    )
