"""``hopsearch es up|down|status``: the local Elasticsearch node."""

from __future__ import annotations

from dataclasses import replace

import click

from hopsearch.cli.local import escluster, esnode
from hopsearch.cli.render import echo_json
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import HopsearchError


def node_spec(settings: Settings) -> esnode.NodeSpec:
    return esnode.spec_from_settings(settings)


def cluster_base(spec: esnode.NodeSpec) -> esnode.NodeSpec:
    """Return ``spec`` with its node directory renamed for a cluster: a cluster keeps its members apart from the single
    node's data (``es-<version>-cluster/node-<i>``)."""
    return replace(spec, node_dir=spec.node_dir.with_name(spec.node_dir.name + "-cluster"))


@click.group()
def es() -> None:
    """Run a local single-node Elasticsearch (loopback, unprivileged uid)."""


@es.command()
@click.option("--version", "version", default=None, help="Elasticsearch version (default: settings.es_version).")
@click.option("--port", type=int, default=None, help="HTTP port (default: settings.es_port).")
@click.option(
    "--nodes",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="Start a cluster of this many nodes (HTTP ports PORT, PORT+1, …; heaps of 256m).",
)
def up(version: str | None, port: int | None, nodes: int) -> None:
    """Download (once), unpack and start the node (or a cluster of --nodes); wait until it answers."""
    overrides: dict[str, object] = {}
    if version:
        overrides["es_version"] = version
    if port:
        overrides["es_port"] = port
    spec = node_spec(load_settings(**overrides))
    if nodes > 1:
        specs = escluster.cluster_specs(cluster_base(spec), nodes)
        click.echo(f"starting a {nodes}-node Elasticsearch {spec.version} cluster on {specs[0].url} ...")
        try:
            status = escluster.start_cluster(specs)
        except HopsearchError as exc:
            raise click.ClickException(str(exc)) from exc
        urls = ",".join(str(url) for url in status["urls"])  # type: ignore[attr-defined]
        click.echo(f"cluster {status['status']} with {nodes} nodes; HOPSEARCH_ES_URL={urls}")
        return
    click.echo(f"starting Elasticsearch {spec.version} on {spec.url} (data in {spec.node_dir}) ...")
    try:
        info = esnode.start(spec)
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"Elasticsearch {info['version']} is up at {spec.url} (status {info['status']})")


@es.command()
@click.option("--version", "version", default=None, help="Elasticsearch version (default: settings.es_version).")
@click.option("--nodes", type=click.IntRange(1, 9), default=1, show_default=True, help="Stop a cluster of this many.")
def down(version: str | None, nodes: int) -> None:
    """Stop the node (or the cluster of --nodes) started by ``es up``."""
    spec = node_spec(load_settings(**({"es_version": version} if version else {})))
    if nodes > 1:
        stopped = escluster.stop_cluster(escluster.cluster_specs(cluster_base(spec), nodes))
        click.echo(f"stopped {stopped} of {nodes} Elasticsearch {spec.version} nodes")
        return
    stopped = esnode.stop(spec)
    click.echo(f"stopped Elasticsearch {spec.version}" if stopped else f"Elasticsearch {spec.version} was not running")


@es.command()
@click.option("--version", "version", default=None, help="Elasticsearch version (default: settings.es_version).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(version: str | None, as_json: bool) -> None:
    """Say whether the local node answers; exit 1 when it does not."""
    spec = node_spec(load_settings(**({"es_version": version} if version else {})))
    info = esnode.ping(spec.url)
    pid = esnode.read_pid(spec)
    if as_json:
        echo_json({"running": info is not None, "pid": pid, **(info or {"url": spec.url})}, indent=None)
    elif info is None:
        click.echo(f"Elasticsearch {spec.version}: not running at {spec.url}")
    else:
        click.echo(f"Elasticsearch {info['version']}: {info['status']} at {spec.url} (pid {pid})")
    if info is None:
        raise SystemExit(1)
