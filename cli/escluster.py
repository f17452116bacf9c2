"""A local cluster of N nodes of one Elasticsearch version on loopback (``hopsearch es up --nodes N``).

Each member is an :class:`~.esnode.NodeSpec` of its own (HTTP port ``port + i``, a fixed free transport
port, its own data, logs and pid file under ``<node_dir>/node-<i>``, a small heap); the members find each
other through ``discovery.seed_hosts`` (every member's transport address) and bootstrap with
``cluster.initial_master_nodes`` (every member's name). All are spawned first, then the cluster is
waited for: every member must answer and see all ``N`` nodes.
"""

from __future__ import annotations

import time
from dataclasses import replace

from hopsearch.cli import esnode
from hopsearch.cli.process import probe
from hopsearch.service.errors import NodeError


def cluster_specs(base: esnode.NodeSpec, nodes: int, *, heap: str = "256m") -> list[esnode.NodeSpec]:
    """The members of an ``nodes``-node cluster built from the single-node ``base`` spec."""
    if nodes < 1:
        raise NodeError(f"a cluster needs at least one node, not {nodes}")
    names = [f"hopsearch-{base.port}-{i}" for i in range(nodes)]
    transports = [esnode.free_port() for _ in range(nodes)]
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


def cluster_status(specs: list[esnode.NodeSpec]) -> dict[str, object] | None:
    """The cluster's health as the first member sees it, once every member answers and sees all members."""
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
