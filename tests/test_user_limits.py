"""End users are limited by whom they are (issue 51, item 2): an IdP user (owner ``idp:<issuer>/sub:<sub>``)
gets a key's fair share of ask slots and ``idp_per_minute`` requests a minute, each user counted apart; a
back end's end users (``key:<key>/sub:<sub>``) count under their key (its total still caps them) and each
gets a fair share of the key's slots. Real HTTP through the app's gate over real Elasticsearch; questions
in flight are held through the app's own admission (as a slow LLM would hold them), with the caller the
verifier makes for that token (by its owner)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from hopsearch.service.access import Caller, owner_id
from hopsearch.service.api.limits import KeyLimiter, SharedWindows, accounts_of
from hopsearch.service.auth.records import KeyLimits
from hopsearch.service.errors import TooManyRequests
from tests.api_fixtures import serving
from tests.conftest import EsNode
from tests.test_keys_api import auth, make_key
from tests.token_fixtures import AUDIENCE, ISSUER, claims, idp_claims, jwk, pem, sign

ASK = {"question": "Who directed Lethal Weapon?", "strategy": "single"}
IDP_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def idp_settings(tmp_path: Path, **more: Any) -> dict[str, Any]:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(IDP_KEY.public_key(), "idp-1")]}))
    return {"idp_issuer": ISSUER, "idp_audience": [AUDIENCE], "idp_jwks": str(jwks), "acl_default": "public", **more}


def idp_user(sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {sign(IDP_KEY, 'RS256', 'idp-1', idp_claims(sub=sub))}"}


def idp_caller(sub: str) -> Caller:
    """The caller the verifier makes of ``sub``'s IdP token, as far as limits go (its owner)."""
    return Caller.of(["public", f"user:{sub}"], subject=sub, owner=owner_id("idp", ISSUER, sub))


async def test_an_idp_user_gets_a_fair_share_of_ask_slots_counted_apart(es_node: EsNode, tmp_path: Path) -> None:
    async with serving(es_node.url, api_max_concurrent_asks=4, **idp_settings(tmp_path)) as api:
        key = await make_key(api, "polite", principals=["public"])
        held = [api.state.admit_question(idp_caller("u-greedy")) for _ in range(2)]  # its share of 4
        refused = await api.client.post(f"/{api.alias}/_ask", json=ASK, headers=idp_user("u-greedy"))
        by_key = await api.client.post(f"/{api.alias}/_ask", json=ASK, headers=auth(key))
        other = await api.client.post(f"/{api.alias}/_ask", json=ASK, headers=idp_user("u-other"))
        for slot in held:
            slot.release()
        again = await api.client.post(f"/{api.alias}/_ask", json=ASK, headers=idp_user("u-greedy"))
    assert refused.status_code == 429, refused.text
    assert "fair share" in refused.text and "u-greedy" in refused.text, refused.text
    assert refused.headers.get("Retry-After"), refused.headers
    assert by_key.status_code == 200, by_key.text  # an API key still gets a slot
    assert other.status_code == 200, other.text  # another IdP user is counted apart
    assert again.status_code == 200, again.text


async def test_idp_concurrent_asks_is_each_users_own_limit(es8_node: EsNode, tmp_path: Path) -> None:
    async with serving(es8_node.url, idp_concurrent_asks=1, **idp_settings(tmp_path)) as api:
        held = api.state.admit_question(idp_caller("u-1"))
        refused = await api.client.post(f"/{api.alias}/_ask", json=ASK, headers=idp_user("u-1"))
        other = await api.client.post(f"/{api.alias}/_ask", json=ASK, headers=idp_user("u-2"))
        held.release()
    assert refused.status_code == 429 and "its limit: 1" in refused.text, refused.text
    assert other.status_code == 200, other.text


async def test_an_idp_user_hits_its_requests_per_minute_counted_apart(es_node: EsNode, tmp_path: Path) -> None:
    async with serving(es_node.url, load=False, **idp_settings(tmp_path, idp_per_minute=3)) as api:
        greedy = [(await api.client.get("/", headers=idp_user("u-greedy"))) for _ in range(4)]
        other = [(await api.client.get("/", headers=idp_user("u-other"))).status_code for _ in range(3)]
    assert [r.status_code for r in greedy] == [200, 200, 200, 429], [r.text for r in greedy]
    refused = greedy[-1]
    assert int(refused.headers["Retry-After"]) >= 1 and "u-greedy" in refused.text, refused.text
    assert other == [200, 200, 200]


async def test_a_back_ends_end_users_each_get_a_fair_share_and_the_key_still_caps(es8_node: EsNode) -> None:
    signer = ed25519.Ed25519PrivateKey.generate()
    async with serving(es8_node.url, acl_default="public", api_max_concurrent_asks=8) as api:
        body = {"principals": ["public"], "token_alg": "EdDSA", "token_public_key": pem(signer.public_key())}
        secret = await make_key(api, "intranet", **body)

        def user(sub: str) -> dict[str, str]:
            token = sign(signer, "EdDSA", "intranet", claims(sub=sub, principals=["public"]))
            return {"Authorization": f"Bearer {token}"}

        def caller(sub: str) -> Caller:
            return Caller.of(["public"], key="intranet", subject=sub, owner=owner_id("key", "intranet", sub))

        async def ask(head: dict[str, str]) -> httpx.Response:
            return await api.client.post(f"/{api.alias}/_ask", json=ASK, headers=head)

        # the key's share of 8 is 4; each of its users' is half of that, 2
        held = [api.state.admit_question(caller("carol")) for _ in range(2)]
        carol, dave = await ask(user("carol")), await ask(user("dave"))
        held += [api.state.admit_question(caller("dave")) for _ in range(2)]
        erin, key = await ask(user("erin")), await ask(auth(secret))
        for slot in held:
            slot.release()
        again = await ask(user("carol"))
    assert carol.status_code == 429 and "fair share of key [intranet]" in carol.text, carol.text
    assert dave.status_code == 200, dave.text  # another user of the same key is counted apart
    assert erin.status_code == 429 and "key [intranet]" in erin.text, erin.text  # the key's total caps them
    assert key.status_code == 429, key.text
    assert again.status_code == 200, again.text


def test_the_shared_windows_of_two_workers_count_an_idp_user(tmp_path: Path) -> None:
    """Two workers' limiters over one file (as ``serve --workers 2`` maps it) count an IdP user's requests
    by its owner; another IdP user, and an API key, have windows of their own."""
    path = tmp_path / "limits"
    SharedWindows.create(path)
    one, two = SharedWindows(path), SharedWindows(path)
    limits = KeyLimits(per_minute=3)
    try:
        workers = [KeyLimiter(clock=lambda: 100.0, shared=one), KeyLimiter(clock=lambda: 100.0, shared=two)]
        alice = accounts_of(idp_caller("alice"), limits)
        for n in range(3):
            workers[n % 2].count(alice)
        for worker in workers:
            with pytest.raises(TooManyRequests, match=r"user \[idp:.*/sub:alice\].*across this service's workers"):
                worker.count(alice)
        workers[1].count(accounts_of(idp_caller("bob"), limits))
        key = accounts_of(Caller.of(["public"], key="alice", owner=owner_id("key", "alice")), KeyLimits())
        for _ in range(3):
            workers[0].count(key, limits)  # a key named like the user's subject: a window of its own
    finally:
        one.close()
        two.close()


def test_many_users_do_not_reset_a_limited_keys_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every user is an account: when the accounts fill the memory, those without a request in the last
    minute go, not the window of a key (or user) that is still limited."""
    monkeypatch.setattr("hopsearch.service.api.limits.MAX_KEYS", 4)
    limiter = KeyLimiter(clock=lambda: 100.0)
    limits = KeyLimits(per_minute=2)
    limiter.request("k", limits)
    limiter.request("k", limits)
    for n in range(20):  # IdP users without a per-minute limit of their own
        limiter.request(owner_id("idp", ISSUER, f"u-{n}"), KeyLimits())
    with pytest.raises(TooManyRequests, match=r"key \[k\]"):
        limiter.request("k", limits)
