"""The Elasticsearch zip download: retried through a CDN's passing 404, checked against its SHA-1, and a
clear error naming the URL and the attempts when it never arrives. A real HTTP server on loopback."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hopsearch.cli.esnode import fetch_zip
from hopsearch.service.errors import NodeError

ZIP = b"PK\x05\x06" + bytes(18)  # an empty zip archive


class Maven:
    """Serves ``/<version>/elasticsearch-<version>.zip`` and its ``.sha1``; the first ``missing``
    requests for the zip answer 404, as Maven Central's CDN once did for a zip it serves."""

    def __init__(self, missing: int = 0, sha1: str | None = None) -> None:
        self.missing = missing
        self.sha1 = sha1 or hashlib.sha1(ZIP).hexdigest()
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
            return 200, f"{self.sha1}  elasticsearch.zip".encode()
        if path.endswith(".zip"):
            zips = sum(1 for p, _ in self.requests if p.endswith(".zip"))
            return (404, b"Not Found") if zips < self.missing else (200, ZIP)
        return 404, b""


@pytest.fixture
def maven_server() -> Iterator[Callable[..., Maven]]:
    started: list[Maven] = []

    def start(missing: int = 0, sha1: str | None = None) -> Maven:
        maven = Maven(missing, sha1)
        threading.Thread(target=maven.server.serve_forever, daemon=True).start()
        started.append(maven)
        return maven

    yield start
    for maven in started:
        maven.server.shutdown()
        maven.server.server_close()


def test_a_passing_404_is_retried(maven_server: Callable[..., Maven], tmp_path: Path) -> None:
    maven = maven_server(missing=2)
    path = fetch_zip("9.2.4", tmp_path, base=maven.base, delays=(0.01, 0.01, 0.01))
    assert path.read_bytes() == ZIP and path == tmp_path / "es" / "elasticsearch-9.2.4.zip"
    assert [status for p, status in maven.requests if p.endswith(".zip")] == [404, 404, 200]
    assert not list((tmp_path / "es").glob("*.part*"))
    # Fetched once: a second call reads the cache.
    assert fetch_zip("9.2.4", tmp_path, base=maven.base, delays=()) == path and len(maven.requests) == 6


def test_a_zip_that_never_arrives_names_the_url_and_attempts(
    maven_server: Callable[..., Maven], tmp_path: Path
) -> None:
    maven = maven_server(missing=99)
    with pytest.raises(NodeError, match=r"9\.2\.4/elasticsearch-9\.2\.4\.zip \(3 attempts\): HTTP Error 404"):
        fetch_zip("9.2.4", tmp_path, base=maven.base, delays=(0.01, 0.01))
    assert not list((tmp_path / "es").iterdir())  # nothing partial left behind


def test_a_checksum_mismatch_is_retried_then_refused(maven_server: Callable[..., Maven], tmp_path: Path) -> None:
    maven = maven_server(sha1="0" * 40)
    with pytest.raises(NodeError, match=r"2 attempts.*checksum mismatch"):
        fetch_zip("8.19.21", tmp_path, base=maven.base, delays=(0.01,))
    assert len([p for p, _ in maven.requests if p.endswith(".zip")]) == 2
    assert not list((tmp_path / "es").iterdir())
