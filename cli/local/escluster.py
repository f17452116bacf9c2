"""A local cluster of N nodes of one Elasticsearch version on loopback (``hopsearch es up --nodes N``).

Each member is an :class:`~.esnode.NodeSpec` of its own (HTTP port ``port + i``, transport port
``port + 100 + i``, its own data, logs and pid file under ``<node_dir>/node-<i>``, a small heap); the
members find each other through ``discovery.seed_hosts`` (every member's transport address) and bootstrap with
``cluster.initial_master_nodes`` (every member's name). All are spawned first, then the cluster is
waited for: every member must answer and see all ``N`` nodes.
"""

from __future__ import annotations

import random
import socket
import time
from dataclasses import replace

from hopsearch.cli.local import esnode
from hopsearch.cli.local.process import probe
from hopsearch.service.errors import NodeError

#: Member ``i`` listens for HTTP on ``port + i`` and for its cluster peers on ``port + 100 + i`` (9200 and
#: 9300 for the default port, as Elasticsearch lays them out): fixed, so a restarted member binds the same
#: ports; the test clusters pick theirs below the ephemeral range (:func:`free_base_port`).
TRANSPORT_OFFSET = 100


def cluster_specs(base: esnode.NodeSpec, nodes: int, *, heap: str = "256m") -> list[esnode.NodeSpec]:
    """Return the members of an ``nodes``-node cluster built from the single-node ``base`` spec."""
    if nodes < 1:
        raise NodeError(f"a cluster needs at least one node, not {nodes}")
    names = [f"hopsearch-{base.port}-{i}" for i in range(nodes)]
    transports = [base.port + TRANSPORT_OFFSET + i for i in range(nodes)]
    if transports[-1] > 65535:
        raise NodeError(f"HTTP port {base.port} leaves no room for {nodes} transport ports above it")
    seeds = tuple(f"127.0.0.1:{port}" for port in transports)
    return [
        replace(
            base,
            port=base.port + i,
            node_dir=base.node_dir / f"node-{i}",
            heap=heap,
            name=names[i],
            transport_port=transports[i],
            seed_hosts=seeds,
            initial_masters=tuple(names),
            cluster_name=f"hopsearch-cluster-{base.port}",
        )
        for i in range(nodes)
    ]


def free_base_port(nodes: int, *, attempts: int = 200) -> int:
    """Find a loopback port ``P`` with the members' HTTP ports ``P … P + nodes - 1`` and transport ports ``P + 100 …``
    all free, below Linux's ephemeral range (32768 up): a port the kernel hands out to some outgoing connection in the
    meantime cannot then keep a restarted member from binding its own."""
    for _ in range(attempts):
        base = random.randrange(20000, 32000 - TRANSPORT_OFFSET - nodes)
        wanted = [base + i for i in range(nodes)] + [base + TRANSPORT_OFFSET + i for i in range(nodes)]
        if all(_free(port) for port in wanted):
            return base
    raise NodeError(f"no free loopback ports for {nodes} members found")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_status(specs: list[esnode.NodeSpec]) -> dict[str, object] | None:
    """Return the cluster's health as the first member sees it, once every member answers and sees all members."""
    infos = [esnode.ping(spec.url) for spec in specs]
    if any(info is None or info.get("status") not in ("green", "yellow") for info in infos):
        return None
    health = probe(f"{specs[0].url}/_cluster/health")
    if not isinstance(health, dict) or int(health.get("number_of_nodes", 0)) != len(specs):
        return None
    return {"urls": [spec.url for spec in specs], "status": health.get("status"), "nodes": len(specs)}


def start_cluster(specs: list[esnode.NodeSpec], *, timeout: float = 300.0) -> dict[str, object]:
    """Spawn every member not answering yet, then wait until they form one cluster."""
    procs = [esnode.launch(spec) for spec in specs if esnode.ping(spec.url) is None]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = cluster_status(specs)
        if status is not None:
            return status
        if any(proc.poll() is not None for proc in procs):
            break
        time.sleep(1.0)
    logs = "; ".join(str(spec.log_file) for spec in specs)
    stop_cluster(specs)
    raise NodeError(f"the {len(specs)}-node cluster did not form within {timeout:.0f} s (logs: {logs})")


def stop_cluster(specs: list[esnode.NodeSpec]) -> int:
    """Stop every member; returns how many were running."""
    return sum(esnode.stop(spec) for spec in specs)


def wait_for_status(
    specs: list[esnode.NodeSpec], *, status: str = "green", timeout: float = 300.0
) -> dict[str, object]:
    """Wait until the cluster has all ``len(specs)`` members and its health is ``status`` (or better),
    asking whichever member answers; :class:`NodeError` after ``timeout``."""
    query = f"_cluster/health?wait_for_status={status}&wait_for_nodes={len(specs)}&timeout=5s"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for spec in specs:
            health = probe(f"{spec.url}/{query}", timeout=10)
            if isinstance(health, dict) and not health.get("timed_out"):
                return health
        time.sleep(0.5)
    raise NodeError(f"the {len(specs)}-node cluster did not become {status} within {timeout:.0f} s")


def wait_answering(spec: esnode.NodeSpec, *, timeout: float = 300.0) -> None:
    """Wait until the member answers HTTP (it may not be in the cluster yet); :class:`NodeError` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while esnode.ping(spec.url) is None:
        if time.monotonic() > deadline:
            raise NodeError(f"{spec.name} did not answer at {spec.url} within {timeout:.0f} s (log: {spec.log_file})")
        time.sleep(0.5)


def restart_member(specs: list[esnode.NodeSpec], i: int, *, timeout: float = 300.0) -> dict[str, object]:
    """Stop member ``i`` (SIGTERM: a graceful shutdown), start it again, wait until the cluster is green."""
    esnode.stop(specs[i])
    esnode.launch(specs[i])
    return wait_for_status(specs, timeout=timeout)
