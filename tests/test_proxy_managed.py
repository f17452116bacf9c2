"""The proxy keeps hopsearch's own indices from callers that are not admins (issue 28), on 7.17, 8.19 and
9.2: beside a managed index (under the service's prefix) holding marker documents stands an unmanaged
index, and every way of naming the managed one — directly, through an alias inside or outside the
prefix, wildcards, ``_all``, comma lists, exclusions, case and encoding variants, date math, remote
names, ``?index=``, ``?source=``, and inside each body kind (``_msearch``, ``_msearch/template``,
``_mget``, ``_search/template``, ``_count``, ``_terms_enum``, ``_field_caps``, ``_sql``, ``_query``,
``_pit``, scroll, and the lookups a query makes on the cluster's side) — is refused for a non-admin:
403 in Elasticsearch's envelope, the marker nowhere in the answer, and nothing of the request reached
the cluster (a :class:`~tests.counting_proxy.CountingProxy` between the service and the node sees only
the service's own ``_resolve/index`` look-ups). The unmanaged index stays readable by the non-admin,
and an admin reads both (or, where the node lacks the module — SQL, ES|QL, templates are not in the
integ-test zips — its request reaches the cluster).

Requests go out with ``http.client`` and a hand-written request line, as in
``tests/test_api_proxy_paths.py``, so that no client normalises a path before hopsearch sees it."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.client
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from hopsearch.service.api import create_app
from hopsearch.service.config.settings import PROXY_ALLOW_READ
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, ES_SECRET, MODEL, api_settings, load_passages, uvicorn_serving_async
from tests.callers import ALICE, as_caller
from tests.conftest import EsNode
from tests.counting_proxy import CountingProxy
from tests.llm_fixtures import server_for

MARK = f"zq{uuid.uuid4().hex[:12]}"
OPEN = f"zo{uuid.uuid4().hex[:12]}"
#: The default allow-list and the query languages: their refusal for non-admins is the policy's, not the list's.
ALLOW = [*PROXY_ALLOW_READ, "POST /_sql", "POST /_query"]
JSON = "application/json"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Case:
    """One request; ``admin``: what an admin gets (``reads``: 200 and the marker; ``ok``: 2xx;
    ``reached``: whatever the cluster answers, the request having reached it)."""

    name: str
    method: str
    target: str
    body: bytes | None = None
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()
    admin: str = "reads"


@dataclass(frozen=True)
class World:
    proxy: CountingProxy
    admin_url: str
    user_url: str
    prefix: str
    managed: str
    unmanaged: str
    alias: str


def raw_request(url: str, case: Case) -> tuple[int, bytes]:
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
    try:
        connection.putrequest(case.method, case.target, skip_accept_encoding=True)
        connection.putheader("X-Hopsearch-Key", API_KEY)
        for name, value in case.headers:
            connection.putheader(name, value)
        if case.body is not None:
            connection.putheader("Content-Type", case.content_type)
            connection.putheader("Content-Length", str(len(case.body)))
        connection.endheaders(case.body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def service_lookup(method: str, path: str, authorization: str | None) -> bool:
    """A request the service made on its own account to decide (never one the caller sent)."""
    return method == "GET" and path.startswith("/_resolve/index/") and authorization == f"ApiKey {ES_SECRET}"


async def observe(world: World, url: str, case: Case) -> tuple[int, bytes, list[tuple[str, str]]]:
    """The answer to ``case`` and what of it reached the cluster (the service's own look-ups aside)."""
    world.proxy.reset()
    status, body = await asyncio.to_thread(raw_request, url, case)
    reached = [(m, p) for m, p, auth in world.proxy.credentials if not service_lookup(m, p, auth)]
    return status, body, reached


def nd(*lines: Any) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def js(value: Any) -> bytes:
    return json.dumps(value).encode()


def managed_cases(w: World, pit: str, scroll: str) -> list[Case]:
    """Every way of reaching the managed index ``w.managed`` (marker documents s1 and s2)."""
    m, u, a, p = w.managed, w.unmanaged, w.alias, w.prefix
    q = f"q=tag:{MARK}"
    lookup = {"terms": {"tag": {"index": m, "id": "s1", "path": "tag"}}}
    via_alias = {"terms": {"tag": {"index": a, "id": "s1", "path": "tag"}}}
    profiled = {"profile": True, "query": lookup}
    encoded = "".join(f"%{b:02X}" for b in m.encode())
    yaml = f"profile: true\nquery:\n  terms:\n    tag:\n      index: {m}\n      id: s1\n      path: tag\n"
    like = {"query": {"more_like_this": {"fields": ["tag"], "like": [{"_index": m, "_id": "s1"}]}}}
    fetch = {"type": "lookup", "target_index": m, "input_field": "tag", "target_field": "tag", "fetch_fields": ["text"]}
    commented = b'{/* a */"profile": true, "query": ' + js(lookup) + b"}"
    duplicate = b'{"query": {"match_all": {}}, "query": ' + js(lookup) + b"}"
    gzipped = (("Content-Encoding", "gzip"),)
    by_tag = {"query": {"match": {"tag": MARK}}}
    every = {"query": {"match_all": {}}}
    template = {"source": '{"query": {{#toJson}}q{{/toJson}}}', "params": {"q": lookup}}
    with_pit = {"pit": {"id": pit, "keep_alive": "1m"}, **by_tag}
    return [
        # the path
        Case("direct", "GET", f"/{m}/_search"),
        Case("alias inside the prefix", "GET", f"/{p}-window/_search"),
        Case("alias outside the prefix (resolved)", "GET", f"/{a}/_search"),
        Case("the passages alias", "GET", f"/{p}-passages/_search", admin="ok"),
        Case("wildcard", "GET", f"/{p}-sec*/_search"),
        Case("star", "GET", f"/*/_search?{q}"),
        Case("_all", "GET", f"/_all/_search?{q}"),
        Case("comma list", "GET", f"/{u},{m}/_search?{q}"),
        Case("encoded comma", "GET", f"/{u}%2C{m}/_search?{q}"),
        Case("exclusion: *,-unmanaged", "GET", f"/*,-{u}/_search?{q}"),
        Case("exclusion: prefix-*,-passages", "GET", f"/{p}-*,-{p}-passages*/_search?{q}"),
        Case("exclusion first", "GET", f"/-{u},{m}/_search", admin="reached"),  # 8.x: `-u` is a name there
        Case("every character encoded", "GET", f"/{encoded}/_search"),
        Case("encoded star", "GET", f"/%2A/_search?{q}"),
        Case("upper case", "GET", f"/{m.upper()}/_search", admin="reached"),
        Case("date math, static", "GET", f"/%3C{m}%3E/_search", admin="reached"),
        Case("date math, dated", "GET", f"/%3C{p}-secret-%7Bnow%7D%3E/_search", admin="reached"),
        Case("remote cluster name", "GET", f"/other:{m}/_search", admin="reached"),
        Case("selector", "GET", f"/{m}::data/_search", admin="reached"),
        Case("no index", "GET", f"/_search?{q}"),
        Case("?index=", "GET", f"/_search?index={m}&{q}"),
        Case("?index= encoded", "GET", f"/_search?ind%65x={m}&{q}"),
        Case("?index= beside a path", "GET", f"/{u}/_search?index={m}", admin="reached"),
        Case("?source=", "GET", f"/{u}/_search?source={quote(json.dumps(profiled))}&source_content_type={JSON}"),
        Case("document", "GET", f"/{m}/_doc/s1"),
        Case("source", "GET", f"/{m}/_source/s1"),
        Case("exists", "HEAD", f"/{m}", admin="ok"),
        Case("mapping", "GET", f"/{m}/_mapping"),
        Case("explain", "POST", f"/{m}/_explain/s1", js({"query": {"match": {"tag": MARK}}})),
        # a query on the unmanaged index that reads the managed one on the cluster's side
        Case("terms lookup, profiled", "POST", f"/{u}/_search", js(profiled)),
        Case("terms lookup, outside alias", "POST", f"/{u}/_search", js({"profile": True, "query": via_alias})),
        Case("terms lookup, rewritten", "POST", f"/{u}/_validate/query?rewrite=true", js({"query": lookup})),
        Case("more_like_this on a document", "POST", f"/{u}/_search", js(like), admin="ok"),
        Case("lookup runtime field", "POST", f"/{u}/_search", js({"runtime_mappings": {"x": fetch}}), admin="reached"),
        Case("terms lookup with comments", "POST", f"/{u}/_search", commented),
        Case("terms lookup as YAML", "POST", f"/{u}/_search", yaml.encode(), content_type="application/yaml"),
        Case(
            "terms lookup gzipped",
            "POST",
            f"/{u}/_search",
            gzip.compress(js(profiled)),
            headers=gzipped,
            admin="reached",
        ),
        Case("duplicate query key", "POST", f"/{u}/_search", duplicate, admin="reached"),
        # _count
        Case("_count", "POST", f"/{m}/_count", admin="ok"),
        Case("_count, no index", "GET", f"/_count?{q}", admin="ok"),
        Case("_count with a lookup", "POST", f"/{u}/_count", js({"query": lookup}), admin="ok"),
        # _terms_enum
        Case("_terms_enum", "POST", f"/{m}/_terms_enum", js({"field": "tag", "string": "zq"})),
        Case("_terms_enum through the alias", "POST", f"/{a}/_terms_enum", js({"field": "tag", "string": "zq"})),
        Case(
            "_terms_enum index_filter",
            "POST",
            f"/{u}/_terms_enum",
            js({"field": "tag", "index_filter": lookup}),
            admin="ok",
        ),
        # _field_caps
        Case("_field_caps", "GET", f"/{m}/_field_caps?fields=f_*"),
        Case("_field_caps, no index", "GET", "/_field_caps?fields=f_*"),
        Case(
            "_field_caps index_filter", "POST", f"/{u}/_field_caps?fields=*", js({"index_filter": lookup}), admin="ok"
        ),
        # _msearch
        Case("_msearch header", "POST", "/_msearch", nd({"index": m}, {}), NDJSON),
        Case("_msearch header list", "POST", "/_msearch", nd({"index": [u, m]}, {}), NDJSON),
        Case("_msearch header comma string", "POST", "/_msearch", nd({"index": f"{u},{m}"}, {}), NDJSON),
        Case("_msearch `indices`", "POST", "/_msearch", nd({"indices": m}, {}), NDJSON, admin="reached"),
        Case("_msearch header under another path", "POST", f"/{u}/_msearch", nd({"index": m}, {}), NDJSON),
        Case("_msearch path default", "POST", f"/{m}/_msearch", nd({}, {}), NDJSON),
        Case("_msearch alias path default", "POST", f"/{a}/_msearch", nd({}, {}), NDJSON),
        Case("_msearch no index", "POST", "/_msearch", nd({}, by_tag), NDJSON),
        Case("_msearch empty index", "POST", "/_msearch", nd({"index": ""}, by_tag), NDJSON, admin="reached"),
        Case("_msearch second search", "POST", "/_msearch", nd({"index": u}, {}, {"index": m}, {}), NDJSON),
        Case("_msearch body lookup", "POST", "/_msearch", nd({"index": u}, profiled), NDJSON),
        Case("_msearch leading empty line", "POST", "/_msearch", b"\n" + nd(by_tag), NDJSON, admin="reached"),
        # _msearch/template and _search/template
        Case(
            "_msearch/template",
            "POST",
            "/_msearch/template",
            nd({"index": m}, {"source": every}),
            NDJSON,
            admin="reached",
        ),
        Case(
            "_msearch/template, unmanaged", "POST", f"/{u}/_msearch/template", nd({}, template), NDJSON, admin="reached"
        ),
        Case("_search/template", "POST", f"/{m}/_search/template", js({"source": every}), admin="reached"),
        Case("_search/template, unmanaged", "POST", f"/{u}/_search/template", js(template), admin="reached"),
        # _mget
        Case("_mget docs", "POST", "/_mget", js({"docs": [{"_index": m, "_id": "s1"}]})),
        Case("_mget docs under another path", "POST", f"/{u}/_mget", js({"docs": [{"_index": m, "_id": "s1"}]})),
        Case("_mget ids", "POST", f"/{m}/_mget", js({"ids": ["s1"]})),
        Case("_mget ids through the alias", "POST", f"/{a}/_mget", js({"ids": ["s1"]})),
        Case(
            "_mget second doc", "POST", "/_mget", js({"docs": [{"_index": u, "_id": "o1"}, {"_index": m, "_id": "s1"}]})
        ),
        # _sql and ES|QL
        Case("_sql", "POST", "/_sql", js({"query": f'SELECT * FROM "{m}"'}), admin="reached"),
        Case("_query (ES|QL)", "POST", "/_query", js({"query": f"FROM {m}"}), admin="reached"),
        # points in time and scrolls (ids an admin opened on the managed index)
        Case("_pit open", "POST", f"/{m}/_pit?keep_alive=1m", admin="ok"),
        Case("search with a point in time", "POST", "/_search", js(with_pit)),
        Case("scroll opened", "POST", f"/{m}/_search?scroll=1m&size=1"),
        Case("scroll continued", "POST", "/_search/scroll", js({"scroll_id": scroll, "scroll": "1m"})),
        Case("scroll cleared", "DELETE", "/_search/scroll", js({"scroll_id": scroll}), admin="ok"),
        Case("_pit closed", "DELETE", "/_pit", js({"id": pit}), admin="ok"),
    ]


def unmanaged_cases(w: World) -> list[Case]:
    """Reads of the unmanaged index (document o1, marker OPEN) every caller may make."""
    u, m = w.unmanaged, w.managed
    match = {"query": {"match": {"tag": OPEN}}}
    return [
        Case("search", "GET", f"/{u}/_search"),
        Case("search with a body", "POST", f"/{u}/_search", js(match)),
        Case("wildcard that reaches no managed index", "GET", f"/{u[:-2]}*/_search"),
        Case("excluding the managed index", "GET", f"/{u[:-2]}*,-{m}/_search"),
        Case(
            "a field called index",
            "POST",
            f"/{u}/_search",
            js({"query": {"bool": {"must_not": {"term": {"index": "x"}}}}}),
        ),
        Case("_count", "POST", f"/{u}/_count", js(match), admin="ok"),
        Case("document", "GET", f"/{u}/_doc/o1"),
        Case("source", "GET", f"/{u}/_source/o1"),
        Case("exists", "HEAD", f"/{u}", admin="ok"),
        Case("mapping", "GET", f"/{u}/_mapping"),
        Case("_field_caps", "GET", f"/{u}/_field_caps?fields=f_*"),
        Case("_terms_enum", "POST", f"/{u}/_terms_enum", js({"field": "tag", "string": "zo"})),
        Case("_validate/query", "POST", f"/{u}/_validate/query?explain=true", js(match)),
        Case("_explain", "POST", f"/{u}/_explain/o1", js(match)),
        Case("_msearch", "POST", "/_msearch", nd({"index": u}, match), NDJSON),
        Case("_msearch path default", "POST", f"/{u}/_msearch", nd({}, match), NDJSON),
        Case("_mget", "POST", "/_mget", js({"docs": [{"_index": u, "_id": "o1"}]})),
        Case("_mget ids", "POST", f"/{u}/_mget", js({"ids": ["o1"]})),
    ]


async def es(node: EsNode, method: str, path: str, body: Any = None) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=node.url, timeout=60) as client:
        answer = await client.request(method, path, json=body)
        assert answer.status_code < 300, (path, answer.text)
        return dict(answer.json()) if answer.content else {}


@contextlib.asynccontextmanager
async def world(node: EsNode) -> AsyncIterator[World]:
    """The service as an admin and as ALICE (not an admin), over one counting proxy and one node."""
    proxy = CountingProxy(node.url)
    suffix = uuid.uuid4().hex[:8]
    unmanaged, alias = f"u{suffix}-open", f"u{suffix}x-view"
    mapping = {"mappings": {"properties": {"text": {"type": "text"}, "tag": {"type": "keyword"}}}}
    with server_for("vllm", MODEL) as llm:
        settings = api_settings(await proxy.start(), llm, proxy_allow=ALLOW)
        prefix = settings.index_prefix
        managed = f"{prefix}-secret"
        store = await Store.connect(settings)
        try:
            await load_passages(store)
            await es(node, "PUT", f"/{managed}", mapping)
            await es(node, "PUT", f"/{unmanaged}", mapping)
            for doc in ("s1", "s2"):
                source = {"text": f"salary table {MARK}", "tag": MARK, f"f_{MARK}": 1}
                await es(node, "PUT", f"/{managed}/_doc/{doc}?refresh=true", source)
            source = {"text": f"open words {OPEN}", "tag": OPEN, f"f_{OPEN}": 1}
            await es(node, "PUT", f"/{unmanaged}/_doc/o1?refresh=true", source)
            actions = [{"add": {"index": managed, "alias": name}} for name in (alias, f"{prefix}-window")]
            await es(node, "POST", "/_aliases", {"actions": actions})
            admin, user = create_app(settings), as_caller(create_app(settings), ALICE)
            async with uvicorn_serving_async(admin) as admin_url, uvicorn_serving_async(user) as user_url:
                yield World(proxy, admin_url, user_url, prefix, managed, unmanaged, alias)
        finally:
            with contextlib.suppress(Exception):
                names = await es(node, "GET", f"/_resolve/index/{prefix}-*")
                for index in [i["name"] for i in names.get("indices", [])] + [unmanaged]:
                    await es(node, "DELETE", f"/{index}")
            await store.close()
            await proxy.stop()


async def opened(w: World) -> tuple[str, str]:
    """A point in time and a scroll an admin opened on the managed index (first page read)."""
    pit = await observe(w, w.admin_url, Case("pit", "POST", f"/{w.managed}/_pit?keep_alive=5m"))
    first = Case("scroll", "POST", f"/{w.managed}/_search?scroll=5m&size=1", js({"sort": ["_doc"]}))
    scroll = await observe(w, w.admin_url, first)
    assert pit[0] == 200 and scroll[0] == 200, (pit[:2], scroll[:2])
    return json.loads(pit[1])["id"], json.loads(scroll[1])["_scroll_id"]


def error_type(body: bytes) -> str | None:
    try:
        return str(json.loads(body)["error"]["type"])
    except (ValueError, KeyError, TypeError):
        return None


def refused_problems(case: Case, status: int, body: bytes, reached: list[tuple[str, str]]) -> list[str]:
    problems = []
    if status != 403 or (case.method != "HEAD" and error_type(body) != "security_exception"):
        problems.append(f"status {status} {body[:160]!r}")
    if MARK.encode() in body:
        problems.append("the marker is in the answer")
    if reached:
        problems.append(f"reached the cluster: {reached}")
    return [f"non-admin, {case.name}: {p}" for p in problems]


def read_problems(who: str, case: Case, expect: str, mark: str, seen: tuple[int, bytes, list[Any]]) -> list[str]:
    status, body, reached = seen
    problems = []
    if not reached:
        problems.append("did not reach the cluster")
    if expect in ("reads", "ok") and not 200 <= status < 300:
        problems.append(f"status {status} {body[:160]!r}")
    if expect == "reads" and mark.encode() not in body:
        problems.append(f"no marker in {body[:160]!r}")
    if expect == "reached" and status == 403 and b"not passed on" in body:
        problems.append("refused by hopsearch")
    return [f"{who}, {case.name}: {p}" for p in problems]


async def test_non_admins_never_reach_a_managed_index_and_admins_read_both(es_node: EsNode) -> None:
    async with world(es_node) as w:
        warm = Case("warm", "GET", f"/{w.unmanaged}/_search")
        assert (await observe(w, w.admin_url, warm))[0] == (await observe(w, w.user_url, warm))[0] == 200
        pit, scroll = await opened(w)
        managed, unmanaged = managed_cases(w, pit, scroll), unmanaged_cases(w)
        problems: list[str] = []
        for case in managed:  # the non-admin first: its requests must leave the ids alone
            problems += refused_problems(case, *await observe(w, w.user_url, case))
        for case in unmanaged:
            problems += read_problems("non-admin", case, case.admin, OPEN, await observe(w, w.user_url, case))
        for case in managed:
            problems += read_problems("admin", case, case.admin, MARK, await observe(w, w.admin_url, case))
        for case in unmanaged:
            problems += read_problems("admin", case, case.admin, OPEN, await observe(w, w.admin_url, case))
    assert not problems, "\n".join(problems)
    assert len(managed) >= 70 and len(unmanaged) >= 18
