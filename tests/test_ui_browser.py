"""The trace viewer in a real browser: headless Chromium (Debian's ``chromium``, installed by
``scripts/bootstrap.sh``) loads the pages of a real DeepRAG run and a real DualRAG run (real
Elasticsearch, scripted LLM) served by uvicorn; the test reads the DOM Chromium rendered, and saves a
screenshot. A passage whose title holds a ``<script>`` renders as text, and the script never runs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import websockets.sync.client
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from hopsearch.service.api import create_app
from hopsearch.service.store import Store
from tests.api_fixtures import any_strategy_model, api_settings, load_passages, uvicorn_serving_async
from tests.conftest import EsNode, unavailable
from tests.dual_fixtures import deep_and_dual_model
from tests.llm_fixtures import server_for

EVIL_TITLE = "<script>document.title='pwned'</script>Lethal Weapon (evil)"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1100,900",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("chromium is not installed (scripts/bootstrap.sh installs Debian's package)")
        raise AssertionError("unreachable")
    return found


def browse(url: str, profile: Path, *, screenshot: Path | None = None) -> str:
    """The DOM Chromium rendered for ``url`` (``--dump-dom``), or a screenshot of it."""
    args = [chromium(), *FLAGS, f"--user-data-dir={profile}"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _evaluate(ws: Any, expression: str, number: list[int]) -> Any:
    """The value of ``expression`` in the page (the DevTools protocol's ``Runtime.evaluate``)."""
    number[0] += 1
    ws.send(
        json.dumps(
            {"id": number[0], "method": "Runtime.evaluate", "params": {"expression": expression, "returnByValue": True}}
        )
    )
    while True:
        reply = json.loads(ws.recv(timeout=30))
        if reply.get("id") == number[0]:
            return ((reply.get("result") or {}).get("result") or {}).get("value")


def _until(ws: Any, expression: str, number: list[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not _evaluate(ws, expression, number):
        if time.monotonic() > deadline:
            where = _evaluate(ws, "location.href + ' ' + document.body.innerText.slice(0, 500)", number)
            raise AssertionError(f"the page never got to: {expression} (it is at {where})")
        time.sleep(0.1)


def confirm_in_browser(url: str, profile: Path) -> str:
    """Open ``url`` (a one-time URL) in headless Chromium as a user does, click its confirmation button, and
    return the DOM of the page the browser lands on (driven over the DevTools protocol: the pages
    themselves run no JavaScript)."""
    profile.mkdir(parents=True, exist_ok=True)
    args = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", url]
    browser = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not active.exists() or not active.read_text().strip():
            assert browser.poll() is None and time.monotonic() < deadline, "chromium did not start its DevTools"
            time.sleep(0.1)
        port = int(active.read_text().split()[0])
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=30).json() if t["type"] == "page"]
        number = [0]
        with websockets.sync.client.connect(pages[0]["webSocketDebuggerUrl"], max_size=None) as ws:
            _until(ws, "document.readyState === 'complete' && !!document.querySelector('#confirm')", number)
            _evaluate(ws, "document.querySelector('#confirm').click()", number)
            _until(ws, "location.pathname.startsWith('/_ui/traces/') && document.readyState === 'complete'", number)
            return str(_evaluate(ws, "document.documentElement.outerHTML", number))
    finally:
        browser.terminate()
        browser.wait(30)


@contextlib.asynccontextmanager
async def viewer(es_url: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The service (no API keys, loopback) with a DeepRAG and a DualRAG trace; yields its URL and them."""
    with server_for("vllm", deep_and_dual_model(any_strategy_model)) as llm:
        settings = api_settings(es_url, llm, api_keys=[])
        store = await Store.connect(settings)
        try:
            target = await load_passages(store)
            evil = {"title": EVIL_TITLE, "text": "Lethal Weapon, directed by Richard Donner.", "source": "jsonl"}
            await store.put_document(target, "p-evil", {**evil, "doc_id": "p-evil", "chunk": 0}, refresh=True)
            async with uvicorn_serving_async(create_app(settings)) as url, httpx.AsyncClient(base_url=url) as http:
                traces = {}
                for strategy in ("deeprag", "dualrag"):
                    body = {"question": "When did the director of Lethal Weapon die?", "strategy": strategy}
                    answer = await http.post(f"/{settings.passages_alias}/_ask", json=body, timeout=60)
                    assert answer.status_code == 200, answer.text
                    trace_id = answer.json()["trace_id"]
                    traces[strategy] = (await http.get(f"/_traces/{trace_id}")).json()["_source"]
                yield url, traces
        finally:
            with contextlib.suppress(Exception):
                await store.client.indices.delete(index=f"{settings.index_prefix}-*", ignore_unavailable=True)
            await store.close()


def steps_of(dom: HTMLParser) -> list[tuple[str, str]]:
    return [
        (row.attributes.get("data-kind") or "", row.attributes.get("data-decision") or "") for row in dom.css("tr.step")
    ]


async def test_trace_pages_in_a_real_browser(es8_node: EsNode, tmp_path: Path) -> None:
    async with viewer(es8_node.url) as (url, traces):
        deep, dual = traces["deeprag"], traces["dualrag"]
        deep_dom = HTMLParser(browse(f"{url}/_ui/traces/{deep['trace_id']}", tmp_path / "profile"))
        dual_dom = HTMLParser(browse(f"{url}/_ui/traces/{dual['trace_id']}", tmp_path / "profile"))
        list_dom = HTMLParser(browse(f"{url}/_ui/traces", tmp_path / "profile"))
        shot = tmp_path / "dualrag-trace.png"
        browse(f"{url}/_ui/traces/{dual['trace_id']}", tmp_path / "profile", screenshot=shot)

    # DeepRAG: every step in order, the decisions and how they were made, the passages with titles.
    assert steps_of(deep_dom) == [(s["kind"], s["decision"] or "") for s in deep["steps"]]
    decisions = {d for _, d in steps_of(deep_dom)}
    assert {"retrieve", "final"} <= decisions
    badge = deep_dom.css_first("tr.step[data-decision=retrieve] .badge")
    assert badge is not None and "retrieve" in badge.text()
    how = deep_dom.css_first("tr.step[data-decision=retrieve] .decided-by")
    assert how is not None and deep["steps"][0]["decided_by"] in how.text()
    queries = [q.text() for q in deep_dom.css("tr.step[data-kind=retrieve] li.query")]
    assert "Who directed Lethal Weapon?" in queries
    lethal = deep_dom.css_first("tr.step[data-kind=retrieve] li.passage[data-passage-id=p-lethal]")
    assert lethal is not None and "Lethal Weapon" in lethal.text()
    answer = deep_dom.css_first("#answer")
    assert answer is not None and deep["answer"].strip() in answer.text()
    raw = deep_dom.css_first("a#raw-json")
    assert raw is not None and raw.attributes["href"] == f"/_traces/{deep['trace_id']}"
    tokens = [row.css("td")[-2].text().strip() for row in deep_dom.css("tr.step[data-kind=generate]")]
    assert all("/" in cell for cell in tokens)

    # DualRAG: the outline per entity, each fact with its passages.
    assert steps_of(dual_dom) == [(s["kind"], s["decision"] or "") for s in dual["steps"]]
    entities = {e.attributes["data-entity"]: e for e in dual_dom.css("section.entity")}
    assert {"Lethal Weapon", "Richard Donner"} <= set(entities)
    facts = entities["Richard Donner"].css("li.fact")
    assert facts and "Richard Donner (1930-2021)" in facts[0].text()
    assert "p-donner" in {p.attributes["data-passage-id"] for p in facts[0].css("li.passage")}

    # A <script> in a passage title is text; it did not run (the title is the page's own).
    evil = [p for p in deep_dom.css("li.passage") if p.attributes.get("data-passage-id") == "p-evil"]
    evil += [p for p in dual_dom.css("li.passage") if p.attributes.get("data-passage-id") == "p-evil"]
    assert evil and all(EVIL_TITLE in p.text() for p in evil)
    for dom in (deep_dom, dual_dom, list_dom):
        assert not dom.css("script")
        title = dom.css_first("title")
        assert title is not None and "pwned" not in title.text()

    # The list page links both traces; the screenshot is a real PNG.
    listed = {row.attributes.get("data-trace-id") for row in list_dom.css("tr.trace-row")}
    assert {deep["trace_id"], dual["trace_id"]} <= listed
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    keep = os.environ.get("HOPSEARCH_UI_SCREENSHOT")  # where to keep it (the README's docs/trace-viewer.png)
    if keep:
        shutil.copyfile(shot, keep)
