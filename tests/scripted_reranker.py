"""A scripted cross-encoder behind a real HTTP server in the common ``/rerank`` shape (vLLM, TEI,
Jina, Cohere): ``{"model", "query", "documents", "top_n"}`` → ``{"results": [{"index", "relevance_score"}]}``.

Its "model": the share of the query's words found in the document, plus a bonus for documents that
contain ``favour`` (so a test can make it disagree with BM25 on purpose)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_WORD = re.compile(r"\w+")


class ScriptedReranker:
    def __init__(self, favour: str = "") -> None:
        self.favour = favour.lower()
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def score(self, query: str, document: str) -> float:
        words = set(_WORD.findall(query.lower()))
        found = set(_WORD.findall(document.lower()))
        share = len(words & found) / len(words) if words else 0.0
        return share + (1.0 if self.favour and self.favour in document.lower() else 0.0)

    def __enter__(self) -> ScriptedReranker:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, **body})
                if self.path != "/v1/rerank":
                    self.send_response(404)
                    self.end_headers()
                    return
                scores = [(i, owner.score(body["query"], d)) for i, d in enumerate(body["documents"])]
                scores.sort(key=lambda pair: -pair[1])
                results = [
                    {"index": i, "relevance_score": s} for i, s in scores[: int(body.get("top_n") or len(scores))]
                ]
                data = json.dumps({"model": body["model"], "results": results}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
