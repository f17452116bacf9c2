"""The trace viewer in a browser once keys exist, as an attacker tries it: two real ``hopsearch serve``
processes over one prefix on a real node (with the permissions corpus and a scripted LLM that echoes its
prompts into its answers), keys A (``public``) and B (``group:hr``) whose questions carry their own markers.
A one-time URL printed by ``hopsearch traces show ID --open`` opens the page in headless Chromium with no
header once its confirmation is clicked; the same URL fails the second time. Over plain HTTP: a code
minted on one process is redeemed on the other and its cookie read on the first; the cookie's flags; a
code minted for A's caller never reads B's trace (nor anything A may not read); a code in a query string
is never read; the cookie works on the viewer's reads only; a revoked key's cookie and code stop."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import Settings
from tests.api_fixtures import API_KEY, api_settings
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.permissions_corpus import QUESTION, leaks, load_corpus
from tests.service_processes import Served, hopsearch_serve, scripted_service, serve_env
from tests.test_permissions_ask import EchoModel
from tests.test_ui_browser import browse, confirm_in_browser

ADMIN = {"Authorization": f"ApiKey {API_KEY}"}
#: key label → (its principals, what it reads as in the permissions corpus)
KEYS = {"a": (["public"], "public"), "b": (["group:hr", "public"], "hr")}


def mark(label: str) -> str:
    return f"VIEWERMARK{label.upper()}"


@dataclass
class Viewer:
    one: Served
    two: Served
    settings: Settings
    env: dict[str, str]
    secrets: dict[str, str]
    traces: dict[str, str]


@contextlib.asynccontextmanager
async def keyed_viewer(es_url: str, tmp_path: Path) -> AsyncIterator[Viewer]:
    """Two ``hopsearch serve`` processes behind the flat admin key, keys A and B, and a trace of each."""
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es_url, llm)
        async with await Runtime.open(settings) as runtime:
            try:
                await load_corpus(runtime.store, tmp_path)
                env = scripted_service(es_url, settings.index_prefix, llm.base_url)
                with (
                    hopsearch_serve(env, tmp_path / "one.log") as one,
                    hopsearch_serve(env, tmp_path / "two.log") as two,
                ):
                    secrets, traces = {}, {}
                    async with httpx.AsyncClient(base_url=one.url, timeout=60) as http:
                        for label, (principals, _) in KEYS.items():
                            made = await http.post(
                                "/_keys", json={"name": f"viewer-{label}", "principals": principals}, headers=ADMIN
                            )
                            assert made.status_code == 201, made.text
                            secrets[label] = made.json()["key"]
                            ask = {"question": f"{QUESTION} {mark(label)}", "strategy": "single", "options": {"k": 10}}
                            head = {"Authorization": f"ApiKey {secrets[label]}"}
                            asked = await http.post(f"/{settings.passages_alias}/_ask", json=ask, headers=head)
                            assert asked.status_code == 200, asked.text
                            traces[label] = asked.json()["trace_id"]
                    await runtime.store.refresh(settings.traces_index)
                    yield Viewer(one, two, settings, env, secrets, traces)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )


def open_url_command(viewer: Viewer, trace_id: str, port: str, *args: str) -> tuple[str, str]:
    """``hopsearch traces show ID --open`` as a user runs it: its one line on stdout, and its stderr."""
    env = serve_env(viewer.env | {"HOPSEARCH_API_PORT": port})
    script = str(Path(sys.executable).parent / "hopsearch")
    done = subprocess.run(
        [script, "traces", "show", trace_id, "--open", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


async def test_a_printed_one_time_url_opens_the_trace_in_a_real_browser_once(es8_node: EsNode, tmp_path: Path) -> None:
    async with keyed_viewer(es8_node.url, tmp_path) as viewer:
        trace_id = viewer.traces["a"]
        port = viewer.one.url.rsplit(":", 1)[1]
        url, note = await asyncio.to_thread(open_url_command, viewer, trace_id, port, "--key", viewer.secrets["a"])
        without = HTMLParser(
            await asyncio.to_thread(browse, f"{viewer.one.url}/_ui/traces/{trace_id}", tmp_path / "p0")
        )
        confirmation = HTMLParser(await asyncio.to_thread(browse, url, tmp_path / "p0"))
        first = HTMLParser(await asyncio.to_thread(confirm_in_browser, url, tmp_path / "p1"))
        again = HTMLParser(await asyncio.to_thread(browse, url, tmp_path / "p2"))
    assert "missing authentication credentials" in without.text() and mark("a") not in without.text()
    # opening the URL alone signs nobody in: it asks, naming whom it signs in as
    assert confirmation.css_first("button#confirm") is not None and "viewer-a" in confirmation.text()
    assert mark("a") not in confirmation.text()
    page = first.text()
    assert first.css("tr.step") and mark("a") in page and trace_id in page, page[:500]
    assert not leaks(page, "public", "private") and mark("b") not in page
    assert "one-time code is unknown, used or expired" in again.text() and mark("a") not in again.text()
    assert url.startswith(f"http://127.0.0.1:{port}/_ui/open/hv_") and trace_id not in url
    assert "opens once" in note


async def confirm_open(http: httpx.AsyncClient, base: str, path: str) -> tuple[httpx.Response, httpx.Response]:
    """A one-time URL opened as a browser does: ``GET`` (the confirmation page and its pre-session cookie),
    then its form's ``POST`` (the exchange); both responses."""
    page = await http.get(f"{base}{path}")
    if page.status_code != 200:
        return page, page
    form = HTMLParser(page.text).css_first("form#open")
    assert form is not None, page.text[:500]
    token = form.css_first("input[name=csrf]")
    assert token is not None
    pre = {"hopsearch_viewer_open": page.cookies["hopsearch_viewer_open"]}
    head = {"Cookie": "; ".join(f"{k}={v}" for k, v in pre.items()), "Origin": base}
    body = {"csrf": str(token.attributes.get("value") or "")}
    posted = await http.post(f"{base}{form.attributes.get('action')}", data=body, headers=head)
    return page, posted


def cookie_flags(response: httpx.Response) -> dict[str, str]:
    [header] = [h for h in response.headers.get_list("set-cookie") if h.startswith("hopsearch_viewer=")]
    parts = [part.strip() for part in header.split(";")]
    flags = {part.split("=", 1)[0].lower(): (part.split("=", 1)[1] if "=" in part else "") for part in parts[1:]}
    return {"name": parts[0].split("=", 1)[0], **flags}


async def _cookie_reads(
    http: httpx.AsyncClient, base: str, cookie: Mapping[str, str], viewer: Viewer
) -> dict[str, httpx.Response]:
    """What the cookie of A gets on each route (no Authorization header)."""
    alias = viewer.settings.passages_alias
    head = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookie.items())}
    return {
        "own page": await http.get(f"{base}/_ui/traces/{viewer.traces['a']}", headers=head),
        "own raw": await http.get(f"{base}/_traces/{viewer.traces['a']}", headers=head),
        "list": await http.get(f"{base}/_ui/traces?size=100", headers=head),
        "b's page": await http.get(f"{base}/_ui/traces/{viewer.traces['b']}", headers=head),
        "b's raw": await http.get(f"{base}/_traces/{viewer.traces['b']}", headers=head),
        "search": await http.post(f"{base}/{alias}/_retrieve", json={"query": "salary"}, headers=head),
        "mint": await http.post(f"{base}/_traces/{viewer.traces['a']}/_open", headers=head),
    }


async def test_a_code_is_one_callers_once_and_never_a_query_parameter(es8_node: EsNode, tmp_path: Path) -> None:
    async with keyed_viewer(es8_node.url, tmp_path) as viewer, httpx.AsyncClient(timeout=60) as http:
        one, two = viewer.one.url, viewer.two.url
        key_a = {"Authorization": f"ApiKey {viewer.secrets['a']}"}
        minted = await http.post(f"{one}/_traces/{viewer.traces['a']}/_open", headers=key_a)
        others = await http.post(f"{one}/_traces/{viewer.traces['b']}/_open", headers=key_a)
        path = minted.json()["path"]
        code = path.rsplit("/", 1)[1]
        as_query = {
            "open": await http.get(f"{two}/_ui/open?code={code}"),
            "page": await http.get(f"{two}/_ui/traces/{viewer.traces['a']}?code={code}"),
            "list": await http.get(f"{two}/_ui/traces?code={code}"),
        }
        _, exchanged = await confirm_open(http, two, path)  # minted on one process, used on the other
        _, reused = await confirm_open(http, one, path)
        cookie = {"hopsearch_viewer": exchanged.cookies["hopsearch_viewer"]}
        reads = await _cookie_reads(http, one, cookie, viewer)
        pending = (await http.post(f"{one}/_traces/{viewer.traces['a']}/_open", headers=key_a)).json()["path"]
        revoked = await http.delete(f"{one}/_keys/viewer-a", headers=ADMIN)
        await asyncio.sleep(1.0)  # a key's lookup is reused at most 0.9 s
        after = await http.get(
            f"{two}/_ui/traces/{viewer.traces['a']}",
            headers={"Cookie": f"hopsearch_viewer={cookie['hopsearch_viewer']}"},
        )
        late_code, _ = await confirm_open(http, one, pending)

    assert minted.status_code == 201 and minted.json()["url"].endswith(path) and minted.json()["expires_in"] == 300
    assert others.status_code == 404  # a code only for a trace the caller may read
    for what, response in as_query.items():
        assert response.status_code in (401, 404) and "set-cookie" not in response.headers, what
        assert mark("a") not in response.text, what
    assert exchanged.status_code == 303 and exchanged.headers["location"] == f"/_ui/traces/{viewer.traces['a']}"
    flags = cookie_flags(exchanged)
    assert flags["name"] == "hopsearch_viewer" and "httponly" in flags and flags["samesite"].lower() == "strict"
    assert flags["path"] == "/" and flags["max-age"] == "3600" and "secure" not in flags  # plain HTTP here
    assert exchanged.headers["cache-control"] == "no-store"
    assert reused.status_code == 401 and "set-cookie" not in reused.headers and "used" in reused.text
    assert reads["own page"].status_code == 200 and mark("a") in reads["own page"].text
    assert reads["own raw"].status_code == 200 and mark("a") in reads["own raw"].text
    assert reads["list"].status_code == 200 and viewer.traces["a"] in reads["list"].text
    assert viewer.traces["b"] not in reads["list"].text
    assert reads["b's page"].status_code == 404 and reads["b's raw"].status_code == 404
    assert reads["search"].status_code == 401 and reads["mint"].status_code == 401  # the viewer's reads only
    for what, response in reads.items():
        assert mark("b") not in response.text and not leaks(response.text, "public", "private"), what
    assert revoked.status_code == 200
    assert after.status_code == 403 and "revoked" in after.text and mark("a") not in after.text
    assert late_code.status_code == 403 and "revoked" in late_code.text and "set-cookie" not in late_code.headers
