"""OpenAI's face as an attacker checks it, through the official ``openai`` SDK over real HTTP on 7.17, 8.19
and 9.2: stored keys of ``group:hr`` and of ``public`` only, and the flat admin key, ask single and DeepRAG
(the scripted LLM echoes its whole prompt into every answer) one body and streamed; every chunk of a stream
and every body is searched for the markers of the passages the caller may not read (0 leaks), and the
caller that may read them gets them. References show a passage's path as hits show it (relative, hidden
fields hidden), and ``/v1`` never reaches the cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, QUESTION
from tests.conftest import EsNode
from tests.counting_proxy import CountingProxy
from tests.openai_fixtures import openai_serving
from tests.permissions_corpus import QUESTION as MARKED_QUESTION
from tests.permissions_corpus import found_markers, leaks, load_corpus, readable
from tests.test_api_proxy_paths import send
from tests.test_permissions_ask import EchoModel

KEYS = {"hr": ["group:hr", "public"], "public": ["public"]}
STRATEGIES = ("single", "deeprag")


async def _answers(client: openai.AsyncOpenAI, strategy: str) -> dict[str, str]:
    """Everything the caller gets for the marked question with ``strategy``: the body, and each chunk."""
    messages: Any = [{"role": "user", "content": MARKED_QUESTION}]
    model = f"hopsearch-{strategy}"
    body = await client.chat.completions.create(model=model, messages=messages, extra_body={"hopsearch": {"k": 10}})
    got = {f"{strategy} body": body.model_dump_json()}
    stream = await client.chat.completions.create(
        model=model, messages=messages, stream=True, extra_body={"hopsearch": {"k": 10}}
    )
    async for number, chunk in _numbered(stream):
        got[f"{strategy} chunk {number}"] = chunk.model_dump_json()
    return got


async def _numbered(stream: Any) -> Any:
    number = 0
    async for chunk in stream:
        yield number, chunk
        number += 1


async def test_no_chunk_leaks_what_the_caller_may_not_read(es_node: EsNode, tmp_path: Path) -> None:
    problems: list[str] = []
    seen: dict[str, set[str]] = {}
    checked = 0

    async def load(store: Store) -> None:
        await load_corpus(store, tmp_path)

    async with openai_serving(es_node.url, script=EchoModel(), load=load, outline_max_age_s=0) as served:
        secrets = {"admin": API_KEY}
        for name, principals in KEYS.items():
            secrets[name] = await served.new_key(name=f"{name}-chat", principals=principals)
        for name, secret in secrets.items():
            client = served.sdk(secret, max_retries=0)
            got: dict[str, str] = {"models": json.dumps([m.id async for m in client.models.list()])}
            for strategy in STRATEGIES:
                got |= await _answers(client, strategy)
            for label, text in got.items():
                if leaked := leaks(text, name, served.settings.acl_default):
                    problems.append(f"{name} {label}: leaked {sorted(leaked)}")
                seen.setdefault(name, set()).update(found_markers(text))
                checked += 1
    assert problems == [], "\n".join(problems)
    assert seen["admin"] >= {"SALARY-MARKER-9", "BOARD-MARKER-7", "PRIVATE-MARKER-5"}  # a leak could not hide
    assert seen["hr"] == readable("hr", "private") and seen["public"] == readable("public", "private")
    print(f"leak checks: {checked} bodies and chunks, 0 leaks")


FOLDER_DOC = {
    "title": "Leave policy",
    "text": "Richard Donner's leave policy: Lethal Weapon staff take leave in 2021.",
    "path": "/srv/company-share/hr/leave.md",
    "url": "file:///srv/company-share/hr/leave.md",
    "metadata": {"root": "/srv/company-share", "owner": "HR-OWNER-SECRET"},
    "source": "docs",
    "doc_id": "hr/leave.md",
    "chunk": 0,
    "acl": ["public"],
}


async def _load_folder_doc(store: Store) -> None:
    target = await store.ensure_indices(None)
    ok, errors = await store.bulk([{"_index": target, "_id": "leave-0", "_source": FOLDER_DOC}])
    assert (ok, errors) == (1, [])
    await store.refresh(target)


async def test_references_show_paths_as_hits_show_them(es8_node: EsNode) -> None:
    bodies: dict[str, tuple[str, dict[str, Any]]] = {}
    for label, overrides in (("default", {}), ("hidden", {"api_hidden_fields": ["path", "metadata.owner"]})):
        async with openai_serving(es8_node.url, load=_load_folder_doc, **overrides) as served:
            retrieved = await served.http.post(
                f"/{served.settings.passages_alias}/_retrieve", json={"query": "leave policy"}
            )
            chat = await served.sdk().chat.completions.create(
                model="hopsearch-single", messages=[{"role": "user", "content": QUESTION}]
            )
            hit_source = retrieved.json()["hits"]["hits"][0]["_source"]
            bodies[label] = (chat.model_dump_json(), hit_source)
            content = chat.choices[0].message.content or ""
            passage = (chat.model_extra or {})["hopsearch"]["passages"][0]
            assert passage["_source"] == hit_source, label  # exactly what _retrieve shows
            if label == "default":
                assert content.endswith("References:\n[1] Leave policy — hr/leave.md"), content
            else:
                assert content.endswith("References:\n[1] Leave policy"), content
    for label, (text, _) in bodies.items():
        assert "/srv/company-share" not in text and "file://" not in text, label
    assert "HR-OWNER-SECRET" not in bodies["hidden"][0] and "HR-OWNER-SECRET" in bodies["default"][0]


async def test_v1_never_reaches_the_cluster(es8_node: EsNode) -> None:
    proxy = CountingProxy(es8_node.url)
    try:
        async with openai_serving(await proxy.start()) as served:
            targets = ["/v1", "/v1/x", "/v1/_search", "/v1/chat/x", "/v1/chat/completions/x", "/v1/models/a/b"]
            proxy.reset()
            answers = [await send(served.url, "GET", target) for target in targets]
            posted = await send(served.url, "GET", "/v1/chat/completions")
            seen = list(proxy.credentials)
    finally:
        await proxy.stop()
    assert seen == []
    for target, (status, _, body) in [*zip(targets, answers, strict=True), ("GET completions", posted)]:
        assert status in (404, 405), (target, status, body[:200])
        error = json.loads(body)["error"]
        assert set(error) >= {"message", "type", "code"} and error["type"] == "invalid_request_error", target
