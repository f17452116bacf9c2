"""The Elasticsearch zip download: retried through passing failures, checked against a pinned SHA-1 or
Maven's, and a clear error naming the URL that failed. A real HTTP server on loopback."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hopsearch.cli.local.esnode import fetch_zip
from hopsearch.service.errors import NodeError

ZIP = b"PK\x05\x06" + bytes(18)  # an empty zip archive


class Maven:
    """Serves ``/<version>/elasticsearch-<version>.zip`` and, where ``sha1`` is given, its ``.sha1`` (Maven
    Central serves none for the 9.x zips); the first ``failing`` requests for the zip answer ``status``."""

    def __init__(self, failing: int = 0, status: int = 503, sha1: str | None = hashlib.sha1(ZIP).hexdigest()) -> None:
        self.failing, self.status, self.sha1 = failing, status, sha1
        self.requests: list[tuple[str, int]] = []
        maven = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = maven.answer(self.path)
                maven.requests.append((self.path, status))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/maven"

    def answer(self, path: str) -> tuple[int, bytes]:
        if path.endswith(".sha1"):
            return (200, f"{self.sha1}  elasticsearch.zip".encode()) if self.sha1 else (404, b"Not Found")
        if path.endswith(".zip"):
            return (self.status, b"busy") if len(self.zips()) < self.failing else (200, ZIP)
        return 404, b""

    def zips(self) -> list[int]:
        return [status for path, status in self.requests if path.endswith(".zip")]


@pytest.fixture
def maven_server() -> Iterator[Callable[..., Maven]]:
    started: list[Maven] = []

    def start(**kwargs: Any) -> Maven:
        maven = Maven(**kwargs)
        threading.Thread(target=maven.server.serve_forever, daemon=True).start()
        started.append(maven)
        return maven

    yield start
    for maven in started:
        maven.server.shutdown()
        maven.server.server_close()


def test_passing_failures_are_retried(maven_server: Callable[..., Maven], tmp_path: Path) -> None:
    maven = maven_server(failing=2, status=503)
    path = fetch_zip("8.0.0", tmp_path, base=maven.base, delays=(0.01, 0.01, 0.01), pinned={})
    assert path.read_bytes() == ZIP and path == tmp_path / "es" / "elasticsearch-8.0.0.zip"
    assert maven.zips() == [503, 503, 200]
    assert [p for p, _ in maven.requests].count("/maven/8.0.0/elasticsearch-8.0.0.zip.sha1") == 1
    assert not list((tmp_path / "es").glob("*.part*"))
    # Fetched once: a second call reads the cache.
    assert fetch_zip("8.0.0", tmp_path, base=maven.base, delays=(), pinned={}) == path and len(maven.requests) == 4


def test_a_404_is_final_and_names_the_url(maven_server: Callable[..., Maven], tmp_path: Path) -> None:
    maven = maven_server(failing=99, status=404)
    with pytest.raises(NodeError, match=r"8\.0\.0/elasticsearch-8\.0\.0\.zip \(1 attempt\): HTTP Error 404"):
        fetch_zip("8.0.0", tmp_path, base=maven.base, delays=(0.01, 0.01), pinned={})
    assert maven.zips() == [404] and not list((tmp_path / "es").iterdir())  # nothing partial left behind


def test_a_checksum_mismatch_is_retried_then_refused(maven_server: Callable[..., Maven], tmp_path: Path) -> None:
    maven = maven_server(sha1="0" * 40)
    with pytest.raises(NodeError, match=r"2 attempts.*checksum mismatch"):
        fetch_zip("8.0.0", tmp_path, base=maven.base, delays=(0.01,), pinned={})
    assert maven.zips() == [200, 200] and not list((tmp_path / "es").iterdir())


def test_a_pinned_version_needs_no_checksum_file(maven_server: Callable[..., Maven], tmp_path: Path) -> None:
    maven = maven_server(sha1=None)  # as Maven Central for the 9.x zips
    digest = hashlib.sha1(ZIP).hexdigest()
    assert fetch_zip("9.2.4", tmp_path, base=maven.base, pinned={"9.2.4": digest}).read_bytes() == ZIP
    assert [p for p, _ in maven.requests] == ["/maven/9.2.4/elasticsearch-9.2.4.zip"]
    with pytest.raises(NodeError, match=r"checksum mismatch: got [0-9a-f]{40}, expected 1{40}"):
        fetch_zip("9.2.4", tmp_path / "other", base=maven.base, delays=(), pinned={"9.2.4": "1" * 40})
    # Unpinned and no checksum served: refused, naming the checksum URL and a way out.
    with pytest.raises(NodeError, match=r"9\.2\.8\.zip\.sha1 \(1 attempt\): HTTP Error 404.*HOPSEARCH_ES_HOME"):
        fetch_zip("9.2.8", tmp_path, base=maven.base, pinned={})


def test_the_versions_the_suite_runs_are_pinned() -> None:
    from hopsearch.cli.local.esnode import PINNED_SHA1
    from tests.conftest import ES_VERSIONS

    assert set(ES_VERSIONS.values()) <= set(PINNED_SHA1)
