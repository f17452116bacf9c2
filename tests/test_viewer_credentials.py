"""The trace viewer's one-time URL and cookie against the issue 51 attacks, on a real node (7.17, 8.19, 9.2):

- login CSRF: opening someone else's one-time URL (a ``GET``, as a link or an ``<img>`` would) signs the
  browser in as nobody; the exchange needs the confirmation page's ``POST`` with the pre-session cookie
  that page set and its token: without the cookie, with another token or another site's ``Origin`` it is a
  403 and the code stays unused;
- a cookie minted from an IdP token ends when the token does (``exp``): 401, and the trace's marker
  nowhere in the answer, once the token is refused;
- a session's principals are checked on every request: a key's narrowed principals, a back end's user
  beyond its key's principals now, an IdP user's stored group removed, the IdP's actions narrowed.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric import rsa

from hopsearch.service.access import Caller, owner_id
from hopsearch.service.auth.groups import EsGroups
from hopsearch.service.auth.keys import KeyStore, NewKey
from hopsearch.service.auth.viewer import ViewerSessions
from hopsearch.service.store import Store
from tests.api_fixtures import any_strategy_model, api_settings, serving
from tests.conftest import EsNode
from tests.dual_fixtures import deep_and_dual_model
from tests.llm_fixtures import server_for
from tests.test_ui_open import confirm_open
from tests.token_fixtures import AUDIENCE, ISSUER, idp_claims, jwk, sign

MARK = "VIEWERCREDMARK"


def _idp(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(key.public_key(), "idp-1")]}))
    return key, {"idp_issuer": ISSUER, "idp_audience": [AUDIENCE], "idp_jwks": str(jwks), "token_leeway_s": 0}


async def _ask(http: httpx.AsyncClient, alias: str, head: dict[str, str]) -> str:
    asked = await http.post(f"/{alias}/_ask", json={"question": f"Who directed it? {MARK}"}, headers=head)
    assert asked.status_code == 200, asked.text
    return str(asked.json()["trace_id"])


async def test_opening_a_one_time_url_signs_nobody_in_without_its_pages_post(es_node: EsNode, tmp_path: Path) -> None:
    async with serving(es_node.url, script=deep_and_dual_model(any_strategy_model)) as api:
        http = api.client
        trace = await _ask(http, api.alias, {})
        await (await api.store()).refresh(api.settings.traces_index)
        path = (await http.post(f"/_traces/{trace}/_open")).json()["path"]
        bare = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://hopsearch")  # no key
        async with bare:
            page = await bare.get(path)
            pre = page.cookies["hopsearch_viewer_open"]
            bare.cookies.clear()  # each attempt sends the cookies it names
            after_get = await bare.get(f"/_ui/traces/{trace}")
            attempts = {
                "no cookie, no token": await bare.post(path, data={}, headers={"Cookie": ""}),
                "no cookie": await bare.post(path, data={"csrf": "x" * 64}, headers={"Cookie": ""}),
                "wrong token": await bare.post(
                    path, data={"csrf": "0" * 64}, headers={"Cookie": f"hopsearch_viewer_open={pre}"}
                ),
                "other site": await bare.post(
                    path,
                    data={"csrf": "0" * 64},
                    headers={"Cookie": f"hopsearch_viewer_open={pre}", "Origin": "https://evil.example"},
                ),
            }
            _, confirmed = await confirm_open(bare, "http://hopsearch", path)
            _, again = await confirm_open(bare, "http://hopsearch", path)
    assert page.status_code == 200 and "hopsearch_viewer=" not in page.headers.get("set-cookie", "")
    assert MARK not in page.text and "an admin" in page.text  # it names whom it signs in as, shows nothing
    assert after_get.status_code == 401 and MARK not in after_get.text
    for what, response in attempts.items():
        assert response.status_code == 403, (what, response.text)
        assert "hopsearch_viewer=" not in response.headers.get("set-cookie", "") and MARK not in response.text, what
    assert confirmed.status_code == 303 and "hopsearch_viewer=" in confirmed.headers["set-cookie"]  # still unused
    assert again.status_code == 401 and "used" in again.text


async def test_a_viewer_cookie_ends_when_its_idp_token_expires(es_node: EsNode, tmp_path: Path) -> None:
    key, idp = _idp(tmp_path)
    async with serving(es_node.url, script=deep_and_dual_model(any_strategy_model), **idp) as api:
        exp = int(time.time()) + 10
        token = sign(key, "RS256", "idp-1", idp_claims(sub="u-exp", exp=exp))
        head = {"Authorization": f"Bearer {token}"}
        trace = await _ask(api.client, api.alias, head)
        await (await api.store()).refresh(api.settings.traces_index)
        minted = await api.client.post(f"/_traces/{trace}/_open", headers=head)
        path = minted.json()["path"]
        bare = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://hopsearch")
        async with bare:
            _, exchanged = await confirm_open(bare, "http://hopsearch", path)
            cookie = {"Cookie": f"hopsearch_viewer={exchanged.cookies['hopsearch_viewer']}"}
            before = await bare.get(f"/_ui/traces/{trace}", headers=cookie)
            await asyncio.sleep(max(0.0, exp - time.time()) + 1.5)
            token_after = await bare.get(f"/_traces/{trace}", headers=head)
            after = {
                "page": await bare.get(f"/_ui/traces/{trace}", headers=cookie),
                "raw": await bare.get(f"/_traces/{trace}", headers=cookie),
                "list": await bare.get("/_ui/traces", headers=cookie),
            }
    assert minted.status_code == 201 and minted.json()["expires_in"] <= 10
    max_age = next(h for h in exchanged.headers.get_list("set-cookie") if h.startswith("hopsearch_viewer="))
    assert int(max_age.lower().split("max-age=")[1].split(";")[0]) <= 10
    assert before.status_code == 200 and MARK in before.text
    assert token_after.status_code == 401
    for what, response in after.items():
        assert response.status_code == 401 and MARK not in response.text and trace not in response.text, what


async def test_a_viewer_session_checks_its_principals_on_every_request(es_node: EsNode, tmp_path: Path) -> None:
    with server_for("vllm", lambda request: "") as llm:
        settings = api_settings(es_node.url, llm, idp_issuer=ISSUER, idp_audience=[AUDIENCE])
    async with await Store.connect(settings) as store:
        try:
            keys = KeyStore.of(store)
            groups = EsGroups(store, cache_s=0)
            await groups.ensure()
            await keys.create(NewKey("narrowed", principals=["group:hr", "group:eng"], actions=["traces", "ask"]))
            await keys.create(NewKey("backend", principals=["group:hr", "group:eng"]))
            await groups.add("user:dana", ["finance"])
            sessions = ViewerSessions(keys, 300, 3600, groups, settings)
            key_caller = (await keys.by_name("narrowed")).caller()  # type: ignore[union-attr]
            end_user = (await keys.by_name("backend")).caller(  # type: ignore[union-attr]
                principals=frozenset({"user:carol", "group:hr", "group:eng", "public"}), subject="carol"
            )
            idp_user = Caller(
                principals=frozenset({"user:dana", "group:finance", "group:staff", "public"}),
                subject="dana",
                owner=owner_id("idp", ISSUER, "dana"),
                indices=("*",),
                actions=frozenset({"search", "ask", "outlines", "traces"}),
            )
            opened = {}
            for label, caller in (("key", key_caller), ("end user", end_user), ("idp", idp_user)):
                redeemed = await sessions.redeem(await sessions.mint_code(caller, "t"))
                opened[label] = (await sessions.open_session(redeemed))[0]
            before = {label: (await sessions.caller(s))[0] for label, s in opened.items()}
            for name in ("narrowed", "backend"):
                await keys._change(name, lambda doc: {**doc, "principals": ["group:eng"]}, "narrowing")
            await groups.remove("user:dana", ["finance"])
            await asyncio.sleep(1.0)  # a key's lookup is reused at most 0.9 s
            narrower = settings.model_copy(update={"idp_actions": ["traces"]})
            later = ViewerSessions(keys, 300, 3600, groups, narrower)
            after = {label: (await later.caller(s))[0] for label, s in opened.items()}
        finally:
            await store.client.indices.delete(
                index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
            )
    assert "group:hr" in before["key"].principals and "group:hr" in before["end user"].principals
    assert "group:finance" in before["idp"].principals and "search" in before["idp"].actions
    assert "group:hr" not in after["key"].principals and "group:eng" in after["key"].principals
    assert "group:hr" not in after["end user"].principals and "group:eng" in after["end user"].principals
    assert "group:finance" not in after["idp"].principals and "group:staff" in after["idp"].principals
    assert after["idp"].actions == frozenset({"traces"})
