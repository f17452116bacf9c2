"""The local cluster launcher's node settings (no node is started here: a three-node cluster does not fit
the default suite's time on two cores; ``hopsearch es up --nodes 3`` starts one by hand)."""

from __future__ import annotations

from pathlib import Path

from hopsearch.cli.local import escluster, esnode


def test_members_get_own_ports_folders_and_one_discovery(tmp_path: Path) -> None:
    base = esnode.NodeSpec(version="8.19.21", port=19400, node_dir=tmp_path / "es", cache_dir=tmp_path / "cache")
    specs = escluster.cluster_specs(base, 3)
    assert [spec.port for spec in specs] == [19400, 19401, 19402]
    assert len({spec.node_dir for spec in specs}) == 3 and all(spec.heap == "256m" for spec in specs)
    assert [spec.transport_port for spec in specs] == [19500, 19501, 19502]
    args = [dict(a[2:].split("=", 1) for a in esnode._settings_args(spec, 0)) for spec in specs]
    assert all("discovery.type" not in a for a in args)
    assert {a["cluster.name"] for a in args} == {"hopsearch-cluster-19400"}
    seeds = {f"127.0.0.1:{spec.transport_port}" for spec in specs}
    for spec, values in zip(specs, args, strict=True):
        assert set(values["discovery.seed_hosts"].split(",")) == seeds
        assert values["cluster.initial_master_nodes"].split(",") == [s.name for s in specs]
        assert values["node.name"] == spec.name and values["transport.port"] == str(spec.transport_port)
        assert values["path.data"] == str(spec.node_dir / "data") and values["network.host"] == "127.0.0.1"


def test_a_single_node_keeps_single_node_discovery(tmp_path: Path) -> None:
    spec = esnode.NodeSpec(version="7.17.29", port=19500, node_dir=tmp_path, cache_dir=tmp_path)
    values = dict(a[2:].split("=", 1) for a in esnode._settings_args(spec, 19501))
    assert values["discovery.type"] == "single-node" and "discovery.seed_hosts" not in values


def test_a_free_base_port_leaves_room_for_every_member_below_the_ephemeral_range() -> None:
    base = escluster.free_base_port(3)
    assert base >= 20000 and base + escluster.TRANSPORT_OFFSET + 2 < 32768
    for port in (base, base + 1, base + 2, base + 100, base + 101, base + 102):
        assert escluster._free(port)
