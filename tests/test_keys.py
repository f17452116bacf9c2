"""The key store over real Elasticsearch (7.17, 8.19, 9.2) and ``hopsearch keys create|list|revoke``: only a
hash of a secret is stored, names are unique, principals normalised, scopes and limits kept, revocation
seen at once by a store that reads without a cache and within ``api_key_cache_s`` by one that caches; bad
input is refused naming the field."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from hopsearch.cli.main import main
from hopsearch.cli.serve import stored_keys
from hopsearch.service.auth.keys import KeyStore, NewKey, caller_for_secret, hash_secret, parse_duration
from hopsearch.service.errors import AlreadyExists, AuthenticationError, AuthorizationError, InputError, NotFound
from hopsearch.service.store import Store
from tests.conftest import EsNode, make_settings
from tests.permissions_corpus import QUERY, found_markers, load_corpus, readable
from tests.service_processes import hopsearch_serve


@pytest.fixture
async def keystore(es_node: EsNode) -> AsyncIterator[KeyStore]:
    settings = make_settings(es_node.url, index_prefix=f"tk{uuid.uuid4().hex[:10]}", api_key_cache_s=0)
    store = await Store.connect(settings)
    try:
        yield KeyStore.of(store)
    finally:
        await store.client.indices.delete(index=settings.keys_index, ignore_unavailable=True)
        await store.close()


def _pem(key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey) -> str:
    return key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


async def test_a_key_is_stored_as_a_hash_and_found_by_its_secret_and_name(keystore: KeyStore) -> None:
    new = NewKey(
        "backend",
        principals=["ＵＳＥＲ:Ａｌｉｃｅ", "group:HR", "public"],
        indices=["company-*"],
        actions=["search", "ask"],
        expires="90d",
        concurrent_asks=2,
        per_minute=30,
        token_algorithm="EdDSA",
        token_public_pem=_pem(ed25519.Ed25519PrivateKey.generate()),
        namespace="team-a",
    )
    secret, record = await keystore.create(new)
    raw = await keystore.store.search(keystore.index, {"query": {"match_all": {}}, "size": 10})
    stored = json.dumps(raw)
    by_secret = await keystore.by_secret(secret)
    by_name = await keystore.by_name("backend")
    caller = await caller_for_secret(keystore, secret)

    assert secret.startswith("hs_") and len(secret) > 40
    assert secret not in stored and hash_secret(secret) in stored  # the secret itself is nowhere
    assert by_secret == by_name == record
    assert record.principals == {"user:alice", "group:hr", "public"}
    assert record.indices == ("company-*",) and record.actions == {"search", "ask"} and not record.admin
    assert record.limits.concurrent_asks == 2 and record.limits.per_minute == 30
    assert record.token_keys[0].algorithm == "EdDSA" and record.token_keys[0].kid == "backend"
    assert record.expires is not None and record.created is not None
    assert timedelta(days=89) < record.expires - record.created <= timedelta(days=90)
    assert caller.key == "backend" and caller.subject == "backend" and caller.namespace == "team-a"
    assert caller.may("search") and not caller.may("traces") and caller.may_use("company-x")
    assert not caller.may_use("hr-secret")
    assert await keystore.by_secret(secret + "x") is None and await keystore.by_name("nobody") is None
    assert await keystore.any_keys()


async def test_names_are_unique_and_revocation_is_seen(keystore: KeyStore) -> None:
    secret, _ = await keystore.create(NewKey("svc", principals=["public"]))
    with pytest.raises(AlreadyExists, match=r"\[svc\] exists already"):
        await keystore.create(NewKey("svc", principals=["public"]))
    cached = KeyStore(keystore.store, keystore.index, cache_s=0.5)  # another process's store
    assert (await cached.by_secret(secret)) is not None
    revoked = await keystore.revoke("svc")
    assert revoked.revoked and (await keystore.by_secret(secret)).revoked  # type: ignore[union-attr]
    await asyncio.sleep(0.6)
    assert (await cached.by_secret(secret)).revoked  # type: ignore[union-attr]
    with pytest.raises(AuthorizationError, match=r"\[svc\] is revoked"):
        await caller_for_secret(keystore, secret)
    with pytest.raises(NotFound):
        await keystore.revoke("nobody")
    listed = await keystore.keys()
    assert [(r.name, r.revoked) for r in listed] == [("svc", True)]


async def test_an_expired_key_is_refused_saying_when(keystore: KeyStore) -> None:
    past = datetime.now(UTC) - timedelta(hours=2)
    secret, record = await keystore.create(NewKey("old", principals=["public"], expires="1h"), now=past)
    with pytest.raises(AuthenticationError, match=r"\[old\] expired at"):
        await caller_for_secret(keystore, secret)
    assert record.expires is not None and not record.usable(datetime.now(UTC))


@pytest.mark.parametrize(
    ("new", "message"),
    [
        (NewKey("bad name!", principals=["public"]), "bad key name"),
        (NewKey("k", principals=["public"], actions=["launch"]), "unknown action 'launch'"),
        (NewKey("k", principals=["public"], actions=["admin"]), "admin action is an admin key's"),
        (NewKey("k"), "needs a principal"),
        (NewKey("k", principals=["team:x"]), "bad principal 'team:x'"),
        (NewKey("k", principals=["public"], expires="soon"), "no duration"),
        (NewKey("k", principals=["public"], indices=["a,b"]), "bad index pattern"),
        (NewKey("k", principals=["public"], token_algorithm="EdDSA", token_public_pem="junk"), "not a PEM"),
        (NewKey("k", principals=["public"], token_algorithm="EdDSA"), "go together"),
    ],
)
async def test_bad_keys_are_refused_naming_what(keystore: KeyStore, new: NewKey, message: str) -> None:
    with pytest.raises(InputError, match=message):
        await keystore.create(new)
    assert not await keystore.any_keys()


def test_token_keys_must_be_of_their_algorithm() -> None:
    from hopsearch.service.auth.keys import token_key

    rsa_pem = _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    assert token_key("k", "RS256", rsa_pem).algorithm == "RS256"
    with pytest.raises(InputError, match="EdDSA takes an Ed25519"):
        token_key("k", "EdDSA", rsa_pem)
    with pytest.raises(InputError, match="RS256 takes an RSA"):
        token_key("k", "RS256", _pem(ed25519.Ed25519PrivateKey.generate()))
    assert parse_duration("12h") == timedelta(hours=12) and parse_duration("2w") == timedelta(weeks=2)


def test_keys_cli_creates_lists_and_revokes(es_node: EsNode, tmp_path: Path) -> None:
    prefix = f"tk{uuid.uuid4().hex[:10]}"
    env = {"HOPSEARCH_ES_URL": es_node.url, "HOPSEARCH_INDEX_PREFIX": prefix, "HOPSEARCH_STATE_DIR": str(tmp_path)}
    pem = tmp_path / "backend.pem"
    pem.write_text(_pem(ed25519.Ed25519PrivateKey.generate()))
    runner = CliRunner()
    try:
        scopes = ["--principal", "group:hr", "--principal", "public", "--index", "co-*", "--action", "search"]
        limits = ["--per-minute", "10", "--expires", "30d", "--token-public-key", str(pem), "--token-alg", "EdDSA"]
        made = runner.invoke(main, ["keys", "create", "backend", *scopes, *limits, "--json"], env=env)
        assert made.exit_code == 0, made.output
        created = json.loads(made.output)
        plain = runner.invoke(main, ["keys", "create", "ops", "--admin"], env=env)
        again = runner.invoke(main, ["keys", "create", "ops", "--admin"], env=env)
        listing = runner.invoke(main, ["keys", "list", "--json"], env=env)
        table = runner.invoke(main, ["keys", "list"], env=env)
        no_such_public_key = runner.invoke(main, ["keys", "remove-public-key", "backend", "ed9"], env=env)
        revoked = runner.invoke(main, ["keys", "revoke", "backend"], env=env)
        after = json.loads(runner.invoke(main, ["keys", "list", "--json"], env=env).output)
        missing = runner.invoke(main, ["keys", "revoke", "nobody"], env=env)
        bad = runner.invoke(main, ["keys", "create", "x", "--principal", "public", "--expires", "forever"], env=env)
    finally:
        httpx.delete(f"{es_node.url}/{prefix}-keys")
    assert created["key"].startswith("hs_") and created["name"] == "backend"
    assert created["principals"] == ["group:hr", "public"] and created["indices"] == ["co-*"]
    assert created["actions"] == ["search"] and created["limits"]["per_minute"] == 10
    assert created["token_keys"] == [{"kid": "backend", "algorithm": "EdDSA"}]
    assert plain.exit_code == 0 and "shown once" in plain.output and "hs_" in plain.output
    secret = plain.output.strip().splitlines()[-1]
    assert again.exit_code != 0 and "exists already" in again.output
    assert listing.exit_code == 0 and table.exit_code == 0 and "backend" in table.output
    assert "public keys" in table.output and "backend (EdDSA)" in table.output  # its id: the key's name
    assert no_such_public_key.exit_code == 1
    assert "key [backend] has no public key [ed9] (it has: backend)" in no_such_public_key.output
    rows = json.loads(listing.output)
    assert [r["name"] for r in rows] == ["backend", "ops"] and [r["state"] for r in rows] == ["active"] * 2
    assert created["key"] not in listing.output + table.output and secret not in listing.output + table.output
    assert "hs_" not in listing.output  # no secret, no hash prefix either
    assert revoked.exit_code == 0 and [r["state"] for r in after] == ["revoked", "active"]
    assert missing.exit_code != 0 and "no key named [nobody]" in missing.output
    assert bad.exit_code != 0 and "--expires" in bad.output


async def test_cli_acts_as_a_key_or_principals(es_node: EsNode, tmp_path: Path) -> None:
    """``search``, ``traces`` and ``outlines`` with ``--key``/``--principal``: what those may read only, the
    key's actions decided; without them, an admin."""
    settings = make_settings(es_node.url, index_prefix=f"tk{uuid.uuid4().hex[:10]}")
    env = {
        "HOPSEARCH_ES_URL": es_node.url,
        "HOPSEARCH_INDEX_PREFIX": settings.index_prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_STATE_DIR": str(tmp_path),
    }
    async with await Store.connect(settings) as store:
        try:
            await load_corpus(store, tmp_path)
            keystore = KeyStore.of(store)
            hr_secret, _ = await keystore.create(NewKey("hr-cli", principals=["group:hr", "public"]))
            search_only, _ = await keystore.create(NewKey("search-cli", principals=["public"], actions=["search"]))
            runner = CliRunner()

            def run(*args: str) -> tuple[int, str]:
                result = await_free(runner, [*args], env)
                return result.exit_code, result.output

            searched = {
                "admin": run("search", QUERY, "-k", "10", "--json"),
                "hr": run("search", QUERY, "-k", "10", "--json", "--key", hr_secret),
                "public": run("search", QUERY, "-k", "10", "--json", "--principal", "public"),
            }
            both = run("search", QUERY, "--key", hr_secret, "--principal", "public")
            unknown = run("search", QUERY, "--key", "hs_nope")
            traces = run("traces", "list", "--key", search_only)
            outlines = run("outlines", "search", "x", "--key", search_only)
        finally:
            await store.client.indices.delete(
                index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
            )
    for name, (code, output) in searched.items():
        assert code == 0, output
        assert found_markers(output) == readable(name, "private"), name
    assert both[0] != 0 and "exclusive" in both[1]
    assert unknown[0] != 0 and "not accepted" in unknown[1]
    assert traces[0] != 0 and "may not use traces" in traces[1]
    assert outlines[0] != 0 and "may not use outlines" in outlines[1]


def await_free(runner: CliRunner, args: list[str], env: dict[str, str]) -> Any:
    """The command run in a thread of its own (it runs its own event loop; the test's is running)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(runner.invoke, main, args, env=env).result()


async def test_serve_listens_beyond_loopback_only_with_keys(keystore: KeyStore) -> None:
    settings = keystore.store.settings
    env = {"HOPSEARCH_ES_URL": settings.es_url[0], "HOPSEARCH_INDEX_PREFIX": settings.index_prefix}
    refused = await asyncio.to_thread(CliRunner().invoke, main, ["serve", "--host", "0.0.0.0"], env=env)
    assert refused.exit_code != 0 and "without API keys" in refused.output and "keys create" in refused.output
    assert not await asyncio.to_thread(stored_keys, settings)
    await keystore.create(NewKey("ops", admin=True))
    assert await asyncio.to_thread(stored_keys, settings)


def test_serve_says_it_is_open_only_where_no_key_is_stored(es8_node: EsNode, tmp_path: Path) -> None:
    """``hopsearch serve`` warns that authentication is off only while ``<prefix>-keys`` holds no key
    (issue 42 item 13): a key made by ``hopsearch keys create`` counts, as it does at the gate."""
    prefix = f"tk{uuid.uuid4().hex[:10]}"
    env = {
        "HOPSEARCH_ES_URL": es8_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_STATE_DIR": str(tmp_path),
    }
    try:
        with hopsearch_serve(env, tmp_path / "open.log") as served:
            opened = httpx.get(f"{served.url}/_keys")
        made = CliRunner().invoke(main, ["keys", "create", "ops", "--admin"], env=env)
        assert made.exit_code == 0, made.output
        with hopsearch_serve(env, tmp_path / "keyed.log") as served:
            keyed = httpx.get(f"{served.url}/_keys")
    finally:
        httpx.delete(f"{es8_node.url}/{prefix}-*")
    open_log, keyed_log = ((tmp_path / name).read_text() for name in ("open.log", "keyed.log"))
    assert opened.status_code == 200 and keyed.status_code == 401  # what the gate decided
    assert "no API keys" not in keyed_log, keyed_log
    assert f"no API keys: none configured (HOPSEARCH_API_KEYS) and none stored in [{prefix}-keys]" in open_log
