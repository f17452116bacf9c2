"""Static checks of docker/: the compose file, the service's Dockerfile and the Kibana saved objects
(Docker cannot run here). Every field a saved object names must exist in es_mappings/ with a type
its aggregation accepts."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hopsearch.service.config.settings import Settings
from tests import packaging
from tests.packaging import package_folders

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
NUMERIC = {"integer", "long", "float", "double", "short", "byte", "half_float", "scaled_float"}
AGG_TYPES: dict[str, set[str]] = {
    "terms": NUMERIC | {"keyword", "boolean"},
    "avg": NUMERIC,
    "sum": NUMERIC,
    "min": NUMERIC,
    "max": NUMERIC,
    "percentiles": NUMERIC,
    "histogram": NUMERIC,
    "cardinality": NUMERIC | {"keyword", "date"},
    "date_histogram": {"date"},
}
SERVICE_KEYS = {
    "image", "build", "command", "entrypoint", "environment", "ports", "volumes", "depends_on", "healthcheck",
    "deploy", "ulimits", "ipc", "restart", "shm_size", "networks", "profiles", "user",
}  # fmt: skip
CLUSTER = {"es01", "es02", "es03", "hopsearch-a", "hopsearch-b", "hopsearch-lb", "es-certs", "es-cluster-setup"}
ES_NODES = ["es01", "es02", "es03"]
REPLICAS = ["hopsearch-a", "hopsearch-b"]


def default_of(value: str) -> str:
    """``${VAR:-default}`` → ``default`` (the value compose uses when the variable is unset)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def fields_of(mapping_name: str) -> dict[str, str]:
    mapping = json.loads((ROOT / "es_mappings" / f"{mapping_name}.json").read_text())["mappings"]["properties"]
    out: dict[str, str] = {}

    def walk(props: dict[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            if "properties" in spec:
                walk(spec["properties"], f"{prefix}{name}.")
                continue
            out[prefix + name] = spec.get("type", "object")
            for sub, sub_spec in spec.get("fields", {}).items():
                out[f"{prefix}{name}.{sub}"] = sub_spec["type"]

    walk(mapping, "")
    return out


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return data


@pytest.fixture(scope="module")
def saved_objects() -> list[dict[str, Any]]:
    lines = (DOCKER / "kibana" / "hopsearch.ndjson").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_compose_structure(compose: dict[str, Any]) -> None:
    extensions = {key for key in compose if key.startswith("x-")}  # anchors the services merge
    assert set(compose) - extensions <= {"name", "services", "volumes", "networks", "configs", "secrets"}
    services = compose["services"]
    assert set(services) == {"elasticsearch", "es-setup", "kibana", "kibana-setup", "vllm", "hopsearch", *CLUSTER}
    for name, service in services.items():
        assert set(service) <= SERVICE_KEYS, name
        assert "image" in service or "build" in service, name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DOCKER / source).exists(), volume
            else:
                assert source in compose["volumes"], volume
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            checked = services[dependency].get("build", {}).get("dockerfile") == "docker/Dockerfile"  # HEALTHCHECK
            one_shot = condition.get("condition") == "service_completed_successfully"  # a setup step: no health
            assert checked or one_shot or "healthcheck" in services[dependency], (name, dependency)
            assert condition == {"condition": "service_completed_successfully" if one_shot else "service_healthy"}
        if "healthcheck" in service:
            assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")


def test_elasticsearch_and_kibana_are_the_full_717_distribution(compose: dict[str, Any]) -> None:
    services = compose["services"]
    es_image = default_of(services["elasticsearch"]["image"])
    kibana_image = default_of(services["kibana"]["image"])
    assert re.fullmatch(r"docker\.elastic\.co/elasticsearch/elasticsearch:7\.17\.\d+", es_image)  # not -oss
    assert kibana_image == es_image.replace("elasticsearch/elasticsearch", "kibana/kibana")
    environment = services["elasticsearch"]["environment"]
    assert environment["discovery.type"] == "single-node"
    assert "elasticsearch:9200" in services["kibana"]["environment"]["ELASTICSEARCH_HOSTS"]


def test_vllm_serves_the_configured_model_on_a_gpu(compose: dict[str, Any]) -> None:
    vllm = compose["services"]["vllm"]
    command = [str(part) for part in vllm["command"]]
    model = command[command.index("--model") + 1]
    served = command[command.index("--served-model-name") + 1]
    assert model.startswith("${VLLM_MODEL:-") and default_of(model)
    assert served == compose["services"]["hopsearch"]["environment"]["HOPSEARCH_LLM_MODEL"]
    (device,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert default_of(vllm["image"]).startswith("vllm/vllm-openai:")


def test_the_service_is_configured_only_through_real_settings(compose: dict[str, Any]) -> None:
    service = compose["services"]["hopsearch"]
    environment = service["environment"]
    for name in environment:
        assert name.startswith("HOPSEARCH_") and name[10:].lower() in Settings.model_fields, name
    assert environment["HOPSEARCH_LLM_BASE_URL"] == "http://vllm:8000/v1"
    assert environment["HOPSEARCH_ES_URL"] == "http://elasticsearch:9200"
    assert environment["HOPSEARCH_API_KEYS"].startswith("${HOPSEARCH_API_KEYS:?")  # required, no default
    port = environment["HOPSEARCH_API_PORT"]
    assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert (DOCKER / service["build"]["context"] / service["build"]["dockerfile"]).is_file()


def test_dockerfile_builds_the_wheel_then_installs_it_as_a_non_root_user(compose: dict[str, Any]) -> None:
    build, final = packaging.stages()
    assert build.name and re.fullmatch(r"python:3\.1[1-9]-slim", build.base) and final.base == build.base
    copied: set[str] = set()
    for args in build.args_of("COPY"):
        *sources, _ = args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            copied.add(source)
    assert copied == {"pyproject.toml", "setup.py", "README.md", *package_folders()}  # what setup.py packages
    assert any(re.fullmatch(r"pip wheel .*--no-deps .*--wheel-dir /wheels \.", run) for run in build.args_of("RUN"))
    assert final.args_of("COPY") == [f"--from={build.name} /wheels /tmp/wheels"]  # no source in the image
    [install] = final.args_of("RUN")[:1]
    assert install.startswith("pip install /tmp/wheels/hopsearch-*.whl && ")
    [user] = final.args_of("USER")
    assert user not in ("root", "0") and any(f"useradd --system --uid 10001 {user}" in r for r in final.args_of("RUN"))


def test_the_image_runs_what_the_installed_package_test_runs(compose: dict[str, Any]) -> None:
    """The health check and CMD tests/test_installed_package.py runs are this file's (read from it)."""
    _, final = packaging.stages()
    runtime = packaging.runtime()
    port = runtime.env["HOPSEARCH_API_PORT"]
    assert port == str(Settings.model_fields["api_port"].default) and final.args_of("EXPOSE") == [port]
    assert runtime.cmd == ["sh", "-c", "hopsearch init && exec hopsearch serve"]
    assert runtime.healthcheck[:2] == ["python", "-c"] and "HOPSEARCH_API_PORT" in runtime.healthcheck[2]
    assert "/_health" in runtime.healthcheck[2]
    service = compose["services"]["hopsearch"]
    assert "healthcheck" not in service and "command" not in service and "entrypoint" not in service
    assert service["environment"]["HOPSEARCH_API_PORT"] == port
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert runtime.extra_packages and all(f'--no-deps "{pin}"' in bootstrap for pin in runtime.extra_packages)


def test_the_import_step_posts_the_ndjson_to_kibana(compose: dict[str, Any]) -> None:
    setup = compose["services"]["kibana-setup"]
    assert setup["restart"] == "no" and setup["depends_on"] == {"kibana": {"condition": "service_healthy"}}
    assert "./kibana:/kibana:ro" in setup["volumes"] and setup["entrypoint"] == ["sh", "/kibana/import.sh"]
    script = (DOCKER / "kibana" / "import.sh").read_text()
    assert "/api/saved_objects/_import?overwrite=true" in script and "kbn-xsrf: true" in script
    assert "hopsearch.ndjson" in script and "set -eu" in script


def test_saved_objects_parse_and_references_resolve(saved_objects: list[dict[str, Any]]) -> None:
    ids = {(item["type"], item["id"]) for item in saved_objects}
    assert len(ids) == len(saved_objects)
    kinds = [item["type"] for item in saved_objects]
    assert kinds.count("index-pattern") == 2 and kinds.count("search") == 1 and kinds.count("dashboard") == 1
    assert kinds.count("visualization") >= 4
    for item in saved_objects:
        assert item["coreMigrationVersion"].startswith("7.17")
        for reference in item["references"]:
            assert (reference["type"], reference["id"]) in ids, (item["id"], reference)
        source = item["attributes"].get("kibanaSavedObjectMeta", {}).get("searchSourceJSON")
        if source is not None and "indexRefName" in json.loads(source):
            names = {ref["name"] for ref in item["references"]}
            assert json.loads(source)["indexRefName"] in names
    dashboard = next(item for item in saved_objects if item["type"] == "dashboard")
    panels = json.loads(dashboard["attributes"]["panelsJSON"])
    assert {p["panelRefName"] for p in panels} == {r["name"] for r in dashboard["references"]}
    assert {p["type"] for p in panels} == {"visualization", "search"}


def test_index_patterns_match_the_default_indices(saved_objects: list[dict[str, Any]]) -> None:
    settings = Settings()
    patterns = {item["id"]: item["attributes"] for item in saved_objects if item["type"] == "index-pattern"}
    for object_id, index, mapping in (
        ("hopsearch-traces", settings.traces_index, "traces"),
        ("hopsearch-outlines", settings.outlines_index, "outlines"),
    ):
        attributes = patterns[object_id]
        assert fnmatch.fnmatch(index, attributes["title"]), (index, attributes["title"])
        assert fields_of(mapping)[attributes["timeFieldName"]] == "date"


def test_every_field_a_saved_object_uses_exists_with_a_fitting_type(saved_objects: list[dict[str, Any]]) -> None:
    mappings = {"hopsearch-traces": fields_of("traces"), "hopsearch-outlines": fields_of("outlines")}
    checked = 0
    for item in saved_objects:
        pattern = next((r["id"] for r in item["references"] if r["type"] == "index-pattern"), None)
        if item["type"] == "search":
            fields = mappings[str(pattern)]
            for column in item["attributes"]["columns"]:
                assert column in fields, column
                checked += 1
            for field, _ in item["attributes"]["sort"]:
                assert field in fields, field
        if item["type"] == "visualization":
            fields = mappings[str(pattern)]
            state = json.loads(item["attributes"]["visState"])
            assert state["title"] == item["attributes"]["title"]
            for aggregation in state["aggs"]:
                field = aggregation["params"].get("field")
                if aggregation["type"] == "count":
                    continue
                assert field in fields, (item["id"], field)
                assert fields[field] in AGG_TYPES[aggregation["type"]], (item["id"], field, fields[field])
                checked += 1
    assert checked > 15


def test_the_ndjson_is_what_the_generator_writes(saved_objects: list[dict[str, Any]]) -> None:
    spec = importlib.util.spec_from_file_location("build_saved_objects", DOCKER / "kibana" / "build_saved_objects.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render() == (DOCKER / "kibana" / "hopsearch.ndjson").read_text()


def started_with(compose: dict[str, Any], name: str) -> set[str]:
    """The services ``docker compose up NAME`` starts: NAME and what it depends on, transitively."""
    services = compose["services"]
    found = {name}
    for dependency in services[name].get("depends_on", {}):
        found |= started_with(compose, dependency)
    return found


def test_the_cluster_profile_is_three_nodes_and_two_replicas_behind_a_balancer(compose: dict[str, Any]) -> None:
    services = compose["services"]
    profiled = {name for name, service in services.items() if "profiles" in service}
    assert profiled == CLUSTER and all(services[name]["profiles"] == ["cluster"] for name in CLUSTER)
    # Naming the balancer starts the cluster, the replicas and vLLM, not the single-node stack.
    assert started_with(compose, "hopsearch-lb") == CLUSTER | {"vllm"}
    single = services["elasticsearch"]
    volumes = set()
    for name in ES_NODES:
        node = services[name]
        environment = node["environment"]
        assert default_of(node["image"]) == default_of(single["image"])  # the same full 7.17 distribution
        assert environment["node.name"] == name and "discovery.type" not in environment
        assert environment["discovery.seed_hosts"].split(",") == ES_NODES
        assert environment["cluster.initial_master_nodes"].split(",") == ES_NODES
        assert environment["cluster.name"] == services["es01"]["environment"]["cluster.name"]
        assert environment["xpack.security.enabled"] == "true"
        assert environment["xpack.security.transport.ssl.enabled"] == "true"  # a cluster with security needs it
        assert "wait_for_nodes=3" in node["healthcheck"]["test"][1]
        volume, certs = node["volumes"]  # its data, and the transport certificates es-certs made
        volumes.add(volume.split(":")[0])
        assert certs == "escerts:/usr/share/elasticsearch/config/certs:ro"
    assert len(volumes) == 3 and volumes <= set(compose["volumes"])


def test_the_replicas_are_the_service_over_every_node(compose: dict[str, Any]) -> None:
    services = compose["services"]
    single = services["hopsearch"]
    published = set()
    for name in REPLICAS:
        replica = services[name]
        environment = replica["environment"]
        for variable in environment:
            assert variable.startswith("HOPSEARCH_") and variable[10:].lower() in Settings.model_fields, variable
        urls = environment["HOPSEARCH_ES_URL"].split(",")
        assert urls == [f"http://{node}:9200" for node in ES_NODES]
        assert Settings(es_url=environment["HOPSEARCH_ES_URL"]).es_url == urls  # what the service parses
        assert int(environment["HOPSEARCH_PASSAGES_REPLICAS"]) >= 1
        for variable, value in single["environment"].items():  # the rest as the single-node service has it
            if variable != "HOPSEARCH_ES_URL":
                assert environment[variable] == value, (name, variable)
        assert replica["build"] == single["build"] and replica["image"] == single["image"]
        assert not {"healthcheck", "command", "entrypoint"} & set(replica)  # the image's own (Dockerfile)
        (port,) = replica["ports"]
        assert port.endswith(f":{environment['HOPSEARCH_API_PORT']}")
        published.add(port.rsplit(":", 1)[0])
    assert len(published) == 2
    first = services["hopsearch-a"]["depends_on"]
    assert set(first) == {*ES_NODES, "es-cluster-setup", "vllm"}  # cluster healthy, users made, before `init`
    assert set(services["hopsearch-b"]["depends_on"]) == {"hopsearch-a"}  # init runs once, in the first


def test_the_balancer_spreads_over_both_replicas(compose: dict[str, Any]) -> None:
    balancer = compose["services"]["hopsearch-lb"]
    (volume,) = balancer["volumes"]
    source, target, _ = volume.split(":")
    config = (DOCKER / source).read_text()
    assert target == "/etc/nginx/conf.d/default.conf"
    servers = re.findall(r"^\s*server\s+([\w.-]+:\d+)", config, re.M)
    port = compose["services"]["hopsearch-a"]["environment"]["HOPSEARCH_API_PORT"]
    assert servers == [f"{name}:{port}" for name in REPLICAS]
    (listen,) = re.findall(r"^\s*listen\s+(\d+);", config, re.M)
    assert balancer["ports"] == [f"127.0.0.1:{listen}:{listen}"]
    assert f"127.0.0.1:{listen}/_health/live" in " ".join(balancer["healthcheck"]["test"])
    assert "proxy_buffering off;" in config  # _ask streams Server-Sent Events
    assert set(balancer["depends_on"]) == set(REPLICAS)


def test_security_is_on_and_the_auditor_reads_traces_only(compose: dict[str, Any]) -> None:
    """Elasticsearch and Kibana with security on (issue 28): Kibana as kibana_system, the service as its own
    user, every health check and the import authenticated; the trace auditor's role reads the traces index
    and nothing of passages or outlines."""
    services = compose["services"]
    assert services["elasticsearch"]["environment"]["xpack.security.enabled"] == "true"
    assert services["elasticsearch"]["environment"]["ELASTIC_PASSWORD"].startswith("${ELASTIC_PASSWORD:?")
    kibana = services["kibana"]["environment"]
    assert kibana["ELASTICSEARCH_USERNAME"] == "kibana_system" and kibana["ELASTICSEARCH_PASSWORD"].startswith("${")
    for name in ("elasticsearch", "kibana", "es01", "es02", "es03"):
        assert '-u "elastic:$${ELASTIC_PASSWORD}"' in services[name]["healthcheck"]["test"][1], name
    for name in ("hopsearch", "hopsearch-a", "hopsearch-b"):
        environment = services[name]["environment"]
        assert environment["HOPSEARCH_ES_USERNAME"] == "hopsearch" and "HOPSEARCH_ES_PASSWORD" in environment
    assert services["hopsearch"]["depends_on"]["es-setup"]["condition"] == "service_completed_successfully"
    assert '-u "elastic:${ELASTIC_PASSWORD:?' in (DOCKER / "kibana" / "import.sh").read_text()
    setup = (DOCKER / "security" / "setup.sh").read_text()
    auditor = setup[setup.index("/_security/role/hopsearch_trace_auditor") :].split("call ", 1)[0]
    names = re.findall(r'\\"names\\": \[([^\]]*)\]', auditor)
    assert names == ['\\"${PREFIX}-traces\\"'], names  # traces alone: nothing on passages or outlines
    assert '\\"read\\", \\"view_index_metadata\\"' in auditor and "feature_discover.read" in auditor
    service = setup[setup.index("/_security/role/hopsearch_service") :].split("call ", 1)[0]
    assert '\\"${PREFIX}-*\\"' in service
    for volume in ("es-setup", "es-cluster-setup"):
        assert services[volume]["entrypoint"] == ["sh", "/security/setup.sh"]
