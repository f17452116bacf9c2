"""A key that vouches for its users by a header (issue 53, item 1): a chat front end's one key, each employee
with its own rights. Over real HTTP (uvicorn) on a real node, the permissions corpus and the scripted LLM
echoing its whole prompt: the HR user's answers hold the HR marker, the employee's bodies and every stream
chunk none; the header is never read on an ordinary key; a request without it, or with a value that is no
plausible user id, is refused; each user reads only its own traces; each user is limited apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hopsearch.service.access import Caller, owner_id
from hopsearch.service.auth.groups import EsGroups, parse_csv
from hopsearch.service.auth.records import KeyRecord
from hopsearch.service.auth.user_header import header_user, vouched_caller
from hopsearch.service.errors import AuthenticationError, InputError, RequestInvalid
from hopsearch.service.store import Store
from tests.api_fixtures import serving
from tests.conftest import EsNode
from tests.openai_fixtures import openai_serving
from tests.permissions_corpus import QUERY, QUESTION, found_markers, leaks, load_corpus
from tests.test_keys_api import auth, make_key
from tests.test_permissions_ask import EchoModel

HEADER = "X-OpenWebUI-User-Email"
HR, EMPLOYEE = "Alice.HR@corp.example", "bob@corp.example"
SALARY = "SALARY-MARKER-9"
COMPANY_CSV = f"user,group\n{HR},hr\n{HR},staff\n{EMPLOYEE},staff\n"
OWUI = {"name": "owui", "principals": ["group:hr", "group:staff"], "user_header": HEADER}


async def _chat(client: openai.AsyncOpenAI) -> dict[str, str]:
    """The marked question's whole body and each stream chunk, serialised."""
    messages: Any = [{"role": "user", "content": QUESTION}]
    options: Any = {"hopsearch": {"k": 10}}
    body = await client.chat.completions.create(model="hopsearch-single", messages=messages, extra_body=options)
    got = {"body": body.model_dump_json()}
    stream = await client.chat.completions.create(
        model="hopsearch-single", messages=messages, stream=True, extra_body=options
    )
    number = 0
    async for chunk in stream:
        got[f"chunk {number}"] = chunk.model_dump_json()
        number += 1
    return got


async def test_one_key_answers_two_users_each_with_their_own_rights(es_node: EsNode, tmp_path: Path) -> None:
    async def load(store: Store) -> None:
        await load_corpus(store, tmp_path)
        await EsGroups(store, cache_s=0).import_groups(parse_csv(COMPANY_CSV))

    async with openai_serving(es_node.url, script=EchoModel(), load=load) as served:
        secret = await served.new_key(**OWUI)
        plain = await served.new_key(name="plain", principals=["public"])
        got: dict[str, dict[str, str]] = {}
        for user in (HR, EMPLOYEE):
            got[user] = await _chat(served.sdk(secret, max_retries=0, default_headers={HEADER: user}))
        # the header means nothing on an ordinary key: the HR user's name gets the key's own rights
        got["plain"] = await _chat(served.sdk(plain, max_retries=0, default_headers={HEADER: HR}))
        missing = await served.http.post(
            "/v1/chat/completions",
            json={"model": "hopsearch-single", "messages": [{"role": "user", "content": QUESTION}]},
            headers={"Authorization": f"Bearer {secret}"},
        )
        traces = {user: json.loads(got[user]["body"])["hopsearch"]["trace_id"] for user in (HR, EMPLOYEE)}
        reads = {
            (reader, whose): (
                await served.http.get(
                    f"/_traces/{trace}", headers={"Authorization": f"Bearer {secret}", HEADER: reader}
                )
            ).status_code
            for reader in (HR, EMPLOYEE)
            for whose, trace in traces.items()
        }
        owner = (await served.trace(traces[HR]))["user"]["owner"]
    assert all(SALARY in text for text in (got[HR]["body"], "".join(v for k, v in got[HR].items() if k != "body")))
    problems = [f"{who} {label}" for who in (EMPLOYEE, "plain") for label, text in got[who].items() if SALARY in text]
    assert problems == [], problems
    for label, text in got[EMPLOYEE].items():
        assert not leaks(text, "public", "private"), label
    assert len(got[EMPLOYEE]) > 3 and found_markers(got[EMPLOYEE]["body"]) == {"PUBLIC-MARKER-1"}
    assert missing.status_code == 401, missing.text
    error = missing.json()["error"]
    assert error["type"] == "authentication_error" and HEADER in error["message"], error
    assert reads == {(HR, HR): 200, (HR, EMPLOYEE): 404, (EMPLOYEE, HR): 404, (EMPLOYEE, EMPLOYEE): 200}, reads
    assert owner == f"key:owui/sub:{HR}", owner


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "empty"),
        ("*", "wildcard"),
        ("bo?b@corp.example", "wildcard"),
        ("a,b", "comma"),
        ("x" * 257, "257 characters"),
    ],
)
async def test_a_value_that_is_no_plausible_user_is_refused_400(es8_node: EsNode, value: str, why: str) -> None:
    async with serving(es8_node.url, load=False) as api:
        secret = await make_key(api, **OWUI)
        sent = await api.client.post(
            f"/{api.alias}/_retrieve", json={"query": "salary"}, headers={**auth(secret), HEADER: value}
        )
        on_v1 = await api.client.get("/v1/models", headers={"Authorization": f"Bearer {secret}", HEADER: value})
    assert sent.status_code == 400 and HEADER in sent.text, sent.text
    assert sent.json()["error"]["field"] == f"header.{HEADER.lower()}"
    assert on_v1.status_code == 400 and on_v1.json()["error"]["type"] == "invalid_request_error", on_v1.text


def test_header_values_refused_before_any_lookup() -> None:
    record = KeyRecord(name="owui", principals=frozenset({"group:hr"}), user_header=HEADER)
    name = HEADER.lower().encode()
    for headers in (
        [(name, b"a\x01b")],
        [(name, b"\xff\xfe")],
        [(name, b"a"), (name, b"b")],
        [(name, "bob\u200b".encode())],
    ):
        with pytest.raises(RequestInvalid):
            header_user(record, headers)
    with pytest.raises(AuthenticationError):
        header_user(record, [(b"x-other", b"bob")])
    assert header_user(record, [(name, b" bob@corp.example ")]) == "bob@corp.example"
    with pytest.raises(AuthenticationError):
        record.caller()  # never its own caller (the command line's --key, MCP over stdio)
    caller = vouched_caller(record, "Bob", frozenset({"group:hr", "group:board"}))
    assert caller.principals == {"public", "user:bob", "group:hr"} and not caller.admin  # only the key's groups
    assert caller.owner == owner_id("key", "owui", "Bob")


def test_the_company_csv_names_each_bad_line() -> None:
    assert parse_csv(COMPANY_CSV) == {
        "alice.hr@corp.example": {"group:hr", "group:staff"},
        "bob@corp.example": {"group:staff"},
    }
    assert parse_csv("group,user,dept\nHR,carol,x\n\n") == {"carol": {"group:hr"}}
    for text, line in (
        ("name,team\n", "line 1"),
        ("user,group\nbob\n", "line 2"),
        ("user,group\na,b\nc,*\n", "line 3"),
    ):
        with pytest.raises(InputError, match=line):
            parse_csv(text)


async def test_each_user_of_the_key_has_a_fair_share_and_is_counted_apart(es8_node: EsNode) -> None:
    async with serving(es8_node.url, acl_default="public", api_max_concurrent_asks=8) as api:
        secret = await make_key(api, **OWUI)

        def caller(user: str) -> Caller:
            return Caller.of(["public"], key="owui", subject=user, owner=owner_id("key", "owui", user))

        async def ask(user: str) -> httpx.Response:
            body = {"question": "Who directed Lethal Weapon?", "strategy": "single"}
            return await api.client.post(f"/{api.alias}/_ask", json=body, headers={**auth(secret), HEADER: user})

        held = [api.state.admit_question(caller("carol")) for _ in range(2)]  # half of the key's 4
        carol, dave = await ask("carol"), await ask("dave")
        for slot in held:
            slot.release()
    assert carol.status_code == 429 and "fair share of key [owui]" in carol.text, carol.text
    assert "key:owui/sub:carol" in carol.text, carol.text
    assert dave.status_code == 200, dave.text


async def test_the_keys_requests_per_minute_cap_its_users_together(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False) as api:
        secret = await make_key(api, **OWUI, per_minute=4)
        heads = {user: {**auth(secret), HEADER: user} for user in ("erin", "frank")}
        erin = [(await api.client.get("/", headers=heads["erin"])).status_code for _ in range(3)]
        frank = [(await api.client.get("/", headers=heads["frank"])).status_code for _ in range(2)]
    assert erin == [200, 200, 200] and frank[0] == 200 and frank[1] == 429, (erin, frank)  # the key's 4 cap both


def _mcp_search(query: str) -> dict[str, Any]:
    arguments = {"query": query, "k": 10}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": arguments}}


async def test_the_header_counts_on_every_route_the_key_may_use(es8_node: EsNode, tmp_path: Path) -> None:
    """``_retrieve`` (its fast path), ``/retrieve``, ``/retrieval``, MCP and the proxy: each refuses the key
    without its header and reads with the named user's rights."""
    async with serving(es8_node.url, load=False) as api:
        store = await api.store()
        await load_corpus(store, tmp_path)
        await EsGroups(store, cache_s=0).import_groups(parse_csv(COMPANY_CSV))
        secret = await make_key(api, **OWUI)
        mcp = {"Accept": "application/json, text/event-stream", "Host": "localhost:9280"}  # MCP's host check
        calls = {
            "_retrieve": (f"/{api.alias}/_retrieve", {"query": QUERY, "k": 10}),
            "/retrieve": ("/retrieve", {"queries": [QUERY], "topk": 10}),
            "/retrieval": (
                "/retrieval",
                {"knowledge_id": api.alias, "query": QUERY, "retrieval_setting": {"top_k": 10}},
            ),
            "mcp": ("/_mcp/", _mcp_search(QUERY)),
        }
        got: dict[tuple[str, str], httpx.Response] = {}
        for who, extra in (("none", {}), ("hr", {HEADER: HR}), ("employee", {HEADER: EMPLOYEE})):
            for name, (path, body) in calls.items():
                got[(name, who)] = await api.client.post(path, json=body, headers={**auth(secret), **mcp, **extra})
            got[("proxy", who)] = await api.client.get(f"/{api.alias}/_search", headers={**auth(secret), **extra})
    for name in (*calls, "proxy"):
        refused = got[(name, "none")]
        assert refused.status_code == (403 if name == "/retrieval" else 401), (name, refused.text)
        assert HEADER in refused.text, (name, refused.text)
    for name in calls:
        hr, employee = got[(name, "hr")], got[(name, "employee")]
        assert hr.status_code == 200 and SALARY in hr.text, (name, hr.text[:300])
        assert employee.status_code == 200 and SALARY not in employee.text and "PUBLIC-MARKER-1" in employee.text, name
    assert got[("proxy", "hr")].status_code == 403 and "managed by hopsearch" in got[("proxy", "hr")].text
