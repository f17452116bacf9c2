"""Users' groups in ``<prefix>-groups`` on 7.17, 8.19 and 9.2: ``hopsearch groups`` changes them, both
token verifiers add them to the caller's principals (a back end's within its key), and an access filter
built from such a caller reads the passages those groups may read and no other."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from hopsearch.cli.main import main
from hopsearch.service.access import Scope
from hopsearch.service.auth.groups import EsGroups, UserGroups
from hopsearch.service.auth.records import KeyRecord, TokenKey
from hopsearch.service.auth.tokens import token_verifier
from hopsearch.service.errors import InputError
from hopsearch.service.store import Store
from hopsearch.service.store.esclient import body_of
from tests.token_fixtures import AUDIENCE, ISSUER, Keys, claims, idp_claims, jwk, pem, sign


async def test_groups_are_added_shown_removed_and_listed(store: Store) -> None:
    groups = EsGroups(store, cache_s=0)
    assert await groups.users() == [] and (await groups.show("alice")).groups == ()
    assert await groups.add("ＡＬＩＣＥ", ["ＨＲ", "group:Eng"]) == UserGroups("alice", ("group:eng", "group:hr"))
    assert (await groups.add("user:alice", ["hr", "board"])).groups == ("group:board", "group:eng", "group:hr")
    await groups.add("bob", ["eng"])
    mapping = body_of(await store.client.indices.get_mapping(index=store.settings.groups_index))
    [(_, body)] = mapping.items()
    assert body["mappings"]["_meta"]["kind"] == "hopsearch-groups"
    assert await groups.groups_of("Alice") == {"group:board", "group:eng", "group:hr"}
    assert [u.user for u in await groups.users()] == ["alice", "bob"]
    assert (await groups.remove("alice", ["board", "nonexistent"])).groups == ("group:eng", "group:hr")
    assert (await groups.remove("bob", ["eng"])).groups == ()
    assert await store.get_document(store.settings.groups_index, "bob") is None  # forgotten with its last group
    assert await groups.users() == [UserGroups("alice", ("group:eng", "group:hr"))]
    with pytest.raises(InputError, match=r"group: bad principal 'group:a\*'"):
        await groups.add("alice", ["a*"])
    with pytest.raises(InputError, match="user: bad principal"):
        await groups.add("a,b", ["hr"])


async def test_concurrent_adds_lose_no_group(store: Store) -> None:
    groups = EsGroups(store, cache_s=0)
    await groups.ensure()
    await asyncio.gather(*(groups.add("carol", [f"g{n}"]) for n in range(8)))
    assert await groups.groups_of("carol") == {f"group:g{n}" for n in range(8)}


async def test_a_process_reuses_a_users_groups_for_groups_cache_s(store: Store) -> None:
    cached, admin = EsGroups(store, cache_s=60), EsGroups(store, cache_s=0)
    await admin.add("dave", ["eng"])
    assert await cached.groups_of("dave") == {"group:eng"}
    await admin.remove("dave", ["eng"])
    assert await cached.groups_of("dave") == {"group:eng"}  # within groups_cache_s
    assert await admin.groups_of("dave") == frozenset()


async def test_tokens_carry_the_stored_groups_and_read_what_they_may(store: Store, tmp_path: Path) -> None:
    index = f"{store.settings.index_prefix}-docs"
    await store.client.indices.create(index=index, body={"mappings": {"properties": {"acl": {"type": "keyword"}}}})
    for doc_id, acl in (("hr", ["group:hr"]), ("board", ["group:board"]), ("all", ["public"]), ("eve", ["user:eve"])):
        await store.put_document(index, doc_id, {"acl": acl}, refresh=True)
    groups = EsGroups(store, cache_s=0)
    await groups.add("alice", ["hr", "board"])

    ed = ed25519.Ed25519PrivateKey.generate()
    key = KeyRecord(
        "intranet", frozenset({"group:hr", "group:staff"}), token_keys=(TokenKey("t", "EdDSA", pem(ed.public_key())),)
    )
    check = token_verifier(store.settings, Keys(key), groups)
    assert check is not None
    caller = await check.verify(sign(ed, "EdDSA", "intranet/t", claims(principals=["group:staff"])))
    # board is stored for alice, but not the back end's key's to grant
    assert caller.principals == {"group:hr", "group:staff", "public"}

    async def readable(scope: Scope) -> set[str]:
        body = {"query": {"bool": {"filter": list(scope.clauses())}}}
        return {hit["_id"] for hit in (await store.search(index, body))["hits"]["hits"]}

    assert await readable(Scope(index, caller)) == {"hr", "all"}

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(rsa_key.public_key(), "idp")]}))
    settings = store.settings.model_copy(
        update={"idp_issuer": ISSUER, "idp_audience": [AUDIENCE], "idp_jwks": str(jwks)}
    )
    idp = token_verifier(settings, None, groups)
    assert idp is not None
    caller = await idp.verify(
        sign(rsa_key, "RS256", "idp", idp_claims(sub="alice", groups=[], exp=int(time.time()) + 60))
    )
    assert caller.principals == {"group:hr", "group:board", "user:alice", "public"}
    assert await readable(Scope(index, caller)) == {"hr", "board", "all"}


async def test_the_groups_command(store: Store) -> None:
    env = {"HOPSEARCH_ES_URL": store.settings.es_url[0], "HOPSEARCH_INDEX_PREFIX": store.settings.index_prefix}
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, ["groups", *args], env=env)
        return result.exit_code, result.output

    assert await asyncio.to_thread(invoke, "list") == (0, "no users with stored groups\n")
    assert await asyncio.to_thread(invoke, "add", "Alice", "HR", "eng") == (0, "alice: group:eng, group:hr\n")
    code, out = await asyncio.to_thread(invoke, "add", "bob", "eng", "--json")
    assert code == 0 and json.loads(out) == {"user": "bob", "groups": ["group:eng"]}
    assert await asyncio.to_thread(invoke, "remove", "alice", "eng") == (0, "alice: group:hr\n")
    assert await asyncio.to_thread(invoke, "show", "ALICE") == (0, "alice: group:hr\n")
    assert await asyncio.to_thread(invoke, "list") == (0, "alice: group:hr\nbob: group:eng\n")
    code, out = await asyncio.to_thread(invoke, "list", "--json")
    assert json.loads(out) == [{"user": "alice", "groups": ["group:hr"]}, {"user": "bob", "groups": ["group:eng"]}]
    code, out = await asyncio.to_thread(invoke, "add", "alice", "a*")
    assert code == 1 and "bad principal 'group:a*'" in out
    code, out = await asyncio.to_thread(invoke, "add", "alice")
    assert code == 2 and "Missing argument 'GROUP...'" in out


async def test_groups_import_fills_a_company_from_a_csv(store: Store, tmp_path: Path) -> None:
    """``hopsearch groups import FILE.csv`` (issue 53): columns user,group; add, or ``--replace``; a bad
    line stops the import before anything is written, naming the line."""
    env = {"HOPSEARCH_ES_URL": store.settings.es_url[0], "HOPSEARCH_INDEX_PREFIX": store.settings.index_prefix}
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, ["groups", *args], env=env)
        return result.exit_code, result.output

    company = tmp_path / "company.csv"
    company.write_text("user,group,department\nAlice@Corp.example,HR,x\nalice@corp.example,staff,x\nbob,staff,y\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("user,group\ncarol,staff\ndave,\n")
    assert await asyncio.to_thread(invoke, "import", str(company)) == (
        0,
        f"imported 3 memberships of 2 users from {company}\n",
    )
    assert await asyncio.to_thread(invoke, "show", "alice@corp.example") == (
        0,
        "alice@corp.example: group:hr, group:staff\n",
    )
    code, out = await asyncio.to_thread(invoke, "import", str(bad))
    assert code == 1 and "line 3: the group is empty" in out, out
    assert await asyncio.to_thread(invoke, "show", "carol") == (0, "carol: (no groups)\n")  # nothing written
    (tmp_path / "less.csv").write_text("user,group\nalice@corp.example,staff\n")
    assert (await asyncio.to_thread(invoke, "import", str(tmp_path / "less.csv"), "--replace"))[0] == 0
    assert await asyncio.to_thread(invoke, "show", "alice@corp.example") == (0, "alice@corp.example: group:staff\n")
