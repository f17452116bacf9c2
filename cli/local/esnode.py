"""Run a local single-node Elasticsearch from Maven Central's integ-test-zip (or ``ES_HOME``).

Used by ``hopsearch es up|down|status`` and by the test suite (``python -m hopsearch.cli.local.esnode``
works too). The zip is fetched once into ``<cache_dir>/es/`` (checked against Maven's SHA-1), unpacked
there, and run on loopback as an unprivileged uid (Elasticsearch refuses root): through
``unshare --user --map-user=1000 --map-group=1000`` or, where that is unavailable, ``setpriv``.
Each node keeps its config copy, data, logs and pid file in its own folder; the process itself is
started, probed and stopped by :mod:`.process`, as the LLM server is.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hopsearch.cli.local.process import alive, kill_group, probe, spawn, stop_group, wait_ready
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import NodeError

log = logging.getLogger(__name__)

MAVEN = "https://repo1.maven.org/maven2/org/elasticsearch/distribution/integ-test-zip/elasticsearch"
#: Waits between download attempts, seconds, after a dropped connection, a 5xx or 429, or a checksum
#: that does not match. A 404 or 403 is final.
RETRY_DELAYS = (2.0, 4.0, 8.0, 16.0, 32.0)
#: SHA-1 of the zips the test suite runs, pinned: Maven Central serves no checksum file for the 9.x
#: integ-test zips (…/9.2.4/elasticsearch-9.2.4.zip.sha1 answers 404 while the zip answers 200). For
#: other versions the zip is checked against the ``.sha1`` Maven serves beside it.
PINNED_SHA1 = {
    "7.17.29": "cc70096055282bf9e56da8ee6861ac47da26ce71",
    "8.19.21": "8861771bbfe2fab12ccc386bc8b4c5c6f9619865",
    "9.2.4": "54ca6e33db3623ecf3bed523f9b5c494993ff692",
}


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Where and how one local node runs."""

    version: str
    port: int
    node_dir: Path
    cache_dir: Path
    heap: str = "512m"
    es_home: Path | None = None
    java_home: Path | None = None
    #: Security on (8.x+: users in the file realm, see :func:`add_user`; HTTP stays plain on loopback).
    security: bool = False
    #: A member of a multi-node cluster (:mod:`.escluster`): its name, fixed transport port, the other
    #: members' transport addresses and the cluster's name. Unset: a single node (``discovery.type``).
    name: str | None = None
    transport_port: int | None = None
    seed_hosts: tuple[str, ...] = ()
    initial_masters: tuple[str, ...] = ()
    cluster_name: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.node_dir / "node.pid"

    @property
    def log_file(self) -> Path:
        return self.node_dir / "console.log"


def spec_from_settings(settings: Settings) -> NodeSpec:
    """Return the local node the settings describe (``hopsearch es``, ``demo`` and this module's ``main``)."""
    return NodeSpec(
        version=settings.es_version,
        port=settings.es_port,
        node_dir=settings.state_dir / f"es-{settings.es_version}",
        cache_dir=settings.cache_dir,
        heap=settings.es_heap,
        es_home=settings.es_home,
        java_home=settings.java_home,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch_zip(
    version: str,
    cache_dir: Path,
    *,
    base: str = MAVEN,
    delays: tuple[float, ...] = RETRY_DELAYS,
    pinned: Mapping[str, str] = PINNED_SHA1,
) -> Path:
    """Download the integ-test-zip of ``version`` once, check its SHA-1 (pinned, else Maven's), return
    its path. Passing failures are retried after each of ``delays``; then, or at once for a 404,
    :class:`NodeError` names the URL that failed, the attempts and the error."""
    target = cache_dir / "es" / f"elasticsearch-{version}.zip"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    url = f"{base}/{version}/elasticsearch-{version}.zip"
    part = target.with_suffix(f".part{os.getpid()}")
    expected = pinned.get(version)
    for attempt, delay in enumerate((*delays, None), start=1):
        log.info("downloading %s (attempt %d)", url, attempt)
        where = url
        try:
            if expected is None:
                where = url + ".sha1"
                expected = _read_sha1(where)
            where = url
            _download(url, part, expected)
            break
        except (urllib.error.URLError, OSError, ValueError) as exc:
            part.unlink(missing_ok=True)
            final = isinstance(exc, urllib.error.HTTPError) and exc.code in (403, 404, 410)
            if delay is None or final:
                hint = (
                    "; Maven serves no checksum for this version: use a version it has one for, or "
                    "HOPSEARCH_ES_HOME=<an unpacked distribution>"
                    if final and where.endswith(".sha1")
                    else ""
                )
                raise NodeError(
                    f"cannot download Elasticsearch {version}: {where} ({attempt} attempt"
                    f"{'s' if attempt > 1 else ''}): {exc}{hint}"
                ) from exc
            log.warning("download of %s failed (%s); retrying in %.0f s", where, exc, delay)
            time.sleep(delay)
    part.replace(target)  # atomic: concurrent fetchers never see a partial zip
    return target


def _read_sha1(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode().split()[0].strip())


def _download(url: str, part: Path, expected: str) -> None:
    """``url`` into ``part``; ``ValueError`` when its SHA-1 is not ``expected``."""
    digest = hashlib.sha1()
    with urllib.request.urlopen(url, timeout=600) as response, part.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != expected:
        raise ValueError(f"checksum mismatch: got {digest.hexdigest()}, expected {expected}")


def distribution(spec: NodeSpec) -> Path:
    """Return the unpacked distribution: ``es_home`` if set, else the cached zip unpacked once."""
    if spec.es_home is not None:
        if not (spec.es_home / "bin" / "elasticsearch").is_file():
            raise NodeError(f"ES_HOME {spec.es_home} has no bin/elasticsearch")
        return spec.es_home
    home = spec.cache_dir / "es" / f"elasticsearch-{spec.version}"
    if (home / "bin" / "elasticsearch").is_file():
        return home
    archive = fetch_zip(spec.version, spec.cache_dir)
    staging = spec.cache_dir / "es" / f".unpack-{spec.version}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(staging)
    for path in (staging / f"elasticsearch-{spec.version}" / "bin").iterdir():
        path.chmod(0o755)
    try:
        (staging / f"elasticsearch-{spec.version}").rename(home)
    except OSError:
        if not (home / "bin" / "elasticsearch").is_file():
            raise
    shutil.rmtree(staging, ignore_errors=True)
    return home


#: The oldest Java each Elasticsearch major runs on (9.x needs 21; 7.17 and 8.x run on 17).
MIN_JAVA = {7: 11, 8: 17, 9: 21}


def java_major(home: Path) -> int | None:
    """Return the feature release of the JDK at ``home`` (its ``release`` file, else a number in its name)."""
    try:
        match = re.search(r'^JAVA_VERSION="(?:1\.)?(\d+)', (home / "release").read_text(), re.M)
    except OSError:
        match = re.search(r"(?:^|-)(\d{2})(?:-|\.|$)", home.name)
    return int(match.group(1)) if match else None


def find_java(explicit: Path | None, es_version: str | None = None, jvm: Path = Path("/usr/lib/jvm")) -> Path:
    """Find a JDK for the node: the explicit one, else the oldest JDK under ``jvm`` that the Elasticsearch major of
    ``es_version`` runs on (:data:`MIN_JAVA`; the oldest, since newer JDKs drop what older Elasticsearch releases use,
    such as the security manager), else ``java`` on PATH if new enough."""
    if explicit is not None:
        return explicit
    need = MIN_JAVA.get(int(es_version.split(".")[0]), 17) if es_version else 17
    fitting: list[tuple[int, str, Path]] = []
    if jvm.is_dir():
        for cand in jvm.iterdir():
            major = java_major(cand) if (cand / "bin" / "java").is_file() and not cand.is_symlink() else None
            if major is not None and major >= need:
                fitting.append((major, cand.name, cand))
    if fitting:
        return min(fitting)[2]
    java = shutil.which("java")
    if java:
        home = Path(java).resolve().parent.parent
        if (java_major(home) or need) >= need:
            return home
    what = f"Elasticsearch {es_version}" if es_version else "Elasticsearch"
    raise NodeError(f"no Java {need}+ found for {what}: install a JDK {need}+ or set HOPSEARCH_JAVA_HOME")


def _unprivileged_prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare:
        probe = subprocess.run(
            [unshare, "--user", "--map-user=1000", "--map-group=1000", "true"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return [unshare, "--user", "--map-user=1000", "--map-group=1000"]
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, "--reuid=1000", "--regid=1000", "--clear-groups"]
    raise NodeError("running as root and neither unshare nor setpriv can drop privileges for Elasticsearch")


def _prepare_config(home: Path, spec: NodeSpec) -> Path:
    conf = spec.node_dir / "config"
    if not conf.is_dir():
        shutil.copytree(home / "config", conf)
    return conf


def _settings_args(spec: NodeSpec, transport_port: int) -> list[str]:
    args = {
        "discovery.type": "single-node",
        "network.host": "127.0.0.1",
        "http.port": str(spec.port),
        "transport.port": str(spec.transport_port or transport_port),
        "path.data": str(spec.node_dir / "data"),
        "path.logs": str(spec.node_dir / "logs"),
        "cluster.name": spec.cluster_name or f"hopsearch-{spec.port}",
        "cluster.routing.allocation.disk.threshold_enabled": "false",
        "action.destructive_requires_name": "false",
    }
    if spec.seed_hosts:
        del args["discovery.type"]
        args["node.name"] = spec.name or f"node-{spec.port}"
        args["discovery.seed_hosts"] = ",".join(spec.seed_hosts)
        args["cluster.initial_master_nodes"] = ",".join(spec.initial_masters)
    if spec.security:
        args["xpack.security.enabled"] = "true"
        args["xpack.security.http.ssl.enabled"] = "false"
        args["xpack.security.transport.ssl.enabled"] = "false"
    elif int(spec.version.split(".")[0]) >= 8:
        args["xpack.security.enabled"] = "false"
    return [f"-E{key}={value}" for key, value in args.items()]


def add_user(spec: NodeSpec, name: str, password: str, roles: str, role_yaml: str = "") -> None:
    """Add a file-realm user of a secured node (before :func:`start`); ``role_yaml`` is appended to its ``roles.yml``
    (role definitions that ``roles``, comma-separated, may name)."""
    home = distribution(spec)
    spec.node_dir.mkdir(parents=True, exist_ok=True)
    conf = _prepare_config(home, spec)
    if role_yaml:
        with (conf / "roles.yml").open("a", encoding="utf-8") as out:
            out.write("\n" + role_yaml)
    java = find_java(spec.java_home, spec.version)
    env = dict(os.environ, ES_JAVA_HOME=str(java), JAVA_HOME=str(java), ES_PATH_CONF=str(conf))
    tool = [str(home / "bin" / "elasticsearch-users"), "useradd", name, "-p", password, "-r", roles]
    done = subprocess.run(tool, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NodeError(f"elasticsearch-users useradd {name} failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    for path in conf.iterdir():  # the node runs as another uid: it must read what the tool wrote
        if path.is_file():
            path.chmod(0o644)


def read_pid(spec: NodeSpec) -> int | None:
    """Return the pid in the node's pid file while that process runs, else ``None``."""
    try:
        pid = int(spec.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def ping(url: str, timeout: float = 2.0, auth: tuple[str, str] | None = None) -> dict[str, object] | None:
    """Return the node's version and health if it answers, else ``None``."""
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    health = probe(f"{url}/_cluster/health", timeout, headers=headers)
    nodes = probe(f"{url}/_nodes/_local?filter_path=nodes.*.version", timeout, headers=headers)
    if not isinstance(health, dict) or not isinstance(nodes, dict):
        return None
    versions = [node.get("version") for node in nodes.get("nodes", {}).values()]
    return {"url": url, "status": health.get("status"), "version": versions[0] if versions else None}


def start(spec: NodeSpec, *, timeout: float = 180.0, auth: tuple[str, str] | None = None) -> dict[str, object]:
    """Start the node (idempotent: a node already answering is left alone) and wait until it is green.
    ``auth``: a user of a secured node to ask with."""
    running = ping(spec.url, auth=auth)
    if running is not None:
        return running
    proc = launch(spec)

    def green() -> dict[str, object] | None:
        info = ping(spec.url, auth=auth)
        return info if info is not None and info.get("status") in ("green", "yellow") else None

    try:
        return wait_ready(proc, green, timeout=timeout, what=f"Elasticsearch {spec.version}", log_path=spec.log_file)
    except NodeError:
        stop(spec)
        raise


def launch(spec: NodeSpec) -> subprocess.Popen[bytes]:
    """Spawn the node's process (a stale one of the same spec is stopped first) without waiting for it:
    the members of a cluster answer only once all of them are up (:mod:`.escluster`)."""
    if read_pid(spec) is not None:
        stop(spec)
    cmd, env = command(spec, _settings_args(spec, free_port()))
    proc = spawn(cmd, spec.log_file, env=env)
    spec.pid_file.write_text(str(proc.pid))
    return proc


def command(spec: NodeSpec, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Return the command line and environment that run the distribution's ``bin/elasticsearch`` with
    ``args`` as an unprivileged uid on the JDK its version needs, its config copied into the node's
    folder (also the executable the test suite hands pytest-elasticsearch: ``tests/es_executable.py``)."""
    home = distribution(spec)
    spec.node_dir.mkdir(parents=True, exist_ok=True)
    conf = _prepare_config(home, spec)
    java = find_java(spec.java_home, spec.version)
    env = dict(os.environ)
    env.update(
        {
            "ES_JAVA_HOME": str(java),
            "JAVA_HOME": str(java),
            "ES_PATH_CONF": str(conf),
            "ES_JAVA_OPTS": f"-Xms{spec.heap} -Xmx{spec.heap} -XX:-HeapDumpOnOutOfMemoryError",
            "ES_TMPDIR": str(spec.node_dir / "tmp"),
        }
    )
    (spec.node_dir / "tmp").mkdir(exist_ok=True)
    return [*_unprivileged_prefix(), str(home / "bin" / "elasticsearch"), *args], env


def stop(spec: NodeSpec, *, timeout: float = 60.0) -> bool:
    """Stop the node started from ``spec`` (SIGTERM to its process group, SIGKILL after ``timeout``)."""
    pid = read_pid(spec)
    stopped = pid is not None and stop_group(pid, timeout=timeout)
    spec.pid_file.unlink(missing_ok=True)
    return stopped


def kill(spec: NodeSpec) -> None:
    """SIGKILL the node at once (crash simulation for tests)."""
    pid = read_pid(spec)
    if pid is not None:
        kill_group(pid, timeout=30)


def main(argv: list[str] | None = None) -> int:
    """``python -m hopsearch.cli.local.esnode up|down|status [VERSION PORT DIR]`` for scripts."""
    import sys

    from hopsearch.service.config.settings import load_settings

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("up", "down", "status"):
        print("usage: python -m hopsearch.cli.local.esnode up|down|status")
        return 2
    spec = spec_from_settings(load_settings())
    if args[0] == "up":
        print(json.dumps(start(spec)))
    elif args[0] == "down":
        print("stopped" if stop(spec) else "not running")
    else:
        info = ping(spec.url)
        print(json.dumps(info) if info else "not running")
        return 0 if info else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
