"""Small operator commands: ``init``, ``search``, ``traces show|list``, ``doctor``."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import click
from rich.console import Console
from rich.table import Table

from hopsearch.cli.filters import filter_clauses, filter_options
from hopsearch.cli.local.esnode import find_java
from hopsearch.cli.options import caller_options, cli_caller
from hopsearch.cli.render import answer_text, echo_json, print_answer
from hopsearch.service.app import usecases
from hopsearch.service.app.health import LlmProbe, probe_llm
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.auth.viewer import ViewerSessions
from hopsearch.service.config.settings import Settings, load_settings, shown_url
from hopsearch.service.embedders import embedder_for_id, make_embedder
from hopsearch.service.errors import HopsearchError, IndexMissing, NotFound, RequestInvalid
from hopsearch.service.llm import LLMClient
from hopsearch.service.outlines import purge as outline_purge
from hopsearch.service.requests import CLI_SEARCH, SEARCH_K, SEARCH_MODE, Query
from hopsearch.service.retrieval import without_vectors_note
from hopsearch.service.retrieval.hit_sources import HitSources
from hopsearch.service.store import Store
from hopsearch.service.store.indices import SCHEMA_VERSION, schema_note
from hopsearch.service.strategies.base import describe
from hopsearch.service.text.japanese import ja_tokens_note
from hopsearch.service.traces import reads as trace_reads
from hopsearch.service.types import Embedder, Fusion, RetrievalMode, SearchResult

#: A check of ``doctor``: its mark (``ok``; ``??`` worth knowing; ``!!`` a problem: exit 1) and what it found.
Check = tuple[str, str]


def cluster_overrides(shards: int | None, replicas: int | None) -> dict[str, int]:
    """Return the ``--shards``/``--replicas`` options as settings overrides (only those given)."""
    given = {"passages_shards": shards, "passages_replicas": replicas}
    return {name: value for name, value in given.items() if value is not None}


def _fail(exc: HopsearchError) -> click.ClickException:
    """Return the command's failure: a request the caller got wrong (a blank query…) is a usage error (exit 2)."""
    if isinstance(exc, RequestInvalid):
        return click.UsageError(str(exc))
    return click.ClickException(str(exc))


@click.command("init")
@click.option("--no-embed", is_flag=True, help="Create the passages index without a vector field (BM25 only).")
@click.option("--shards", type=click.IntRange(1, 1024), default=None, help="Primary shards of the passages index.")
@click.option(
    "--replicas",
    type=click.IntRange(0, 16),
    default=None,
    help="Replicas of the passages index (default: 1 on a multi-node cluster, else 0).",
)
def init(no_embed: bool, shards: int | None, replicas: int | None) -> None:
    """Create the passages (version 1 + alias), outlines and traces indices where missing."""

    async def go() -> tuple[str, dict[str, Any]]:
        settings = load_settings(**cluster_overrides(shards, replicas))
        async with await Store.connect(settings) as store:
            index = await store.ensure_indices(None if no_embed else make_embedder(settings))
            return index, store.info.to_dict()

    try:
        index, info = asyncio.run(go())
    except HopsearchError as exc:
        raise _fail(exc) from exc
    caps = info["capabilities"]
    click.echo(f"Elasticsearch {info['version']}: vector mode {caps['vector_mode']}, passages index {index}")


@click.command("search")
@click.argument("query")
@click.option("--mode", type=click.Choice(["bm25", "dense", "hybrid"]), default=SEARCH_MODE, show_default=True)
@click.option("-k", "k", type=click.IntRange(1, 100), default=SEARCH_K, show_default=True)
@click.option("--index", default=None, help="Passages index or alias (default: <prefix>-passages).")
@click.option("--fusion", type=click.Choice(["rrf", "bool", "es_rrf"]), default="rrf", show_default=True)
@click.option("--weights", type=(float, float), default=(1.0, 1.0), help="Hybrid: weights of bm25 and dense.")
@click.option("--rerank", is_flag=True, help="Reorder the top hits with the configured reranker.")
@click.option("--hops", type=click.IntRange(0, 1), default=0, show_default=True, help="1: follow the titles named.")
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
@filter_options
@caller_options
def search(
    query: str,
    mode: str,
    k: int,
    index: str | None,
    fusion: str,
    weights: tuple[float, float],
    rerank: bool,
    hops: int,
    as_json: bool,
    sources: tuple[str, ...],
    filters: tuple[str, ...],
    key: str | None,
    principals: tuple[str, ...],
) -> None:
    """Retrieve passages for QUERY (BM25, dense or hybrid, filtered) and print them."""
    clauses = filter_clauses(sources, filters)

    async def go() -> tuple[SearchResult, bool]:
        async with await Runtime.open(load_settings()) as runtime:
            wanted = Query(query, k, cast(RetrievalMode, mode), cast(Fusion, fusion), weights, rerank=rerank, hops=hops)
            caller = await cli_caller(runtime.store, key, principals)
            request = await usecases.search_request(
                runtime, [wanted], caller=caller, index=index, filters=clauses, fields=CLI_SEARCH
            )
            [result] = await usecases.search(runtime, request)
            return result, caller.admin

    try:
        result, admin = asyncio.run(go())
    except HopsearchError as exc:
        raise _fail(exc) from exc
    if as_json:
        # a non-admin caller (``--key``, ``--principal``) is shown a hit's source as HTTP shows it
        shown = HitSources(load_settings())
        hits = [
            {"_id": h.id, "_score": h.score, "_source": dict(h.source) if admin else shown(h.source)}
            for h in result.hits
        ]
        echo_json({**result.notes(), "hits": hits})
        return
    if result.without_vectors:
        click.echo(f"warning: {without_vectors_note(result.without_vectors)}", err=True)
    if result.index_note:
        click.echo(f"warning: {result.index_note}", err=True)
    if result.hops_note:
        click.echo(f"warning: {result.hops_note}", err=True)
    table = Table(title=f"{describe(result)} — {len(result.hits)} hits")
    for column in ("#", "id", "score", "title", "text"):
        table.add_column(column, overflow="fold")
    for rank, hit in enumerate(result.hits, start=1):
        table.add_row(str(rank), hit.id, f"{hit.score:.3f}", hit.title, hit.text[:160])
    Console().print(table)


@click.group("traces")
def traces() -> None:
    """Read answer traces from the traces index."""


@traces.command("show")
@click.argument("trace_id")
@click.option("--json", "as_json", is_flag=True, help="Print the trace document.")
@click.option(
    "--open",
    "open_url",
    is_flag=True,
    help="Print a one-time URL of the trace in the viewer of `hopsearch serve` (opens once, then a cookie).",
)
@caller_options
def show(trace_id: str, as_json: bool, open_url: bool, key: str | None, principals: tuple[str, ...]) -> None:
    """Print one trace: its steps, decisions, answer and totals."""
    if open_url:
        _print_open_url(trace_id, key, principals)
        return

    async def go() -> dict[str, Any] | None:
        settings = load_settings()
        async with await Store.connect(settings) as store:
            caller = await cli_caller(store, key, principals, "traces")
            return await trace_reads.trace(store, settings.traces_index, trace_id, caller=caller)

    try:
        doc = asyncio.run(go())
    except HopsearchError as exc:
        raise _fail(exc) from exc
    if doc is None:
        raise click.ClickException(f"no trace {trace_id!r}")
    if as_json:
        echo_json(doc)
    else:
        print_answer(Console(), doc)


def _print_open_url(trace_id: str, key: str | None, principals: tuple[str, ...]) -> None:
    """Print a one-time URL of the trace in the viewer of ``hopsearch serve``, for the command's caller."""
    settings = load_settings()

    async def go() -> str:
        async with await Store.connect(settings) as store:
            caller = await cli_caller(store, key, principals, "traces")
            if await trace_reads.trace(store, settings.traces_index, trace_id, caller=caller) is None:
                raise NotFound(f"no trace {trace_id!r}")
            return await ViewerSessions.of(store, settings).mint_code(caller, trace_id)

    try:
        code = asyncio.run(go())
    except HopsearchError as exc:
        raise _fail(exc) from exc
    host = "127.0.0.1" if settings.api_host in ("0.0.0.0", "::") else settings.api_host
    click.echo(f"http://{host}:{settings.api_port}/_ui/open/{code}")
    who = "an admin" if not (key or principals) else "this command's caller"
    click.echo(f"(opens once, within {settings.ui_code_s:g} s; the browser then reads as {who})", err=True)


@traces.command("list")
@click.option("-n", "size", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the traces as JSON (each with its totals).")
@caller_options
def list_traces(size: int, as_json: bool, key: str | None, principals: tuple[str, ...]) -> None:
    """List the most recent traces: when, who asked, the strategy, the question and the answer."""

    async def go() -> list[dict[str, Any]]:
        settings = load_settings()
        async with await Store.connect(settings) as store:
            caller = await cli_caller(store, key, principals, "traces")
            return await trace_reads.recent_traces(store, settings.traces_index, size, caller=caller)

    try:
        rows = asyncio.run(go())
    except HopsearchError as exc:
        raise _fail(exc) from exc
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no traces")
        return
    table = Table(title=f"{len(rows)} most recent traces")
    for column in ("id", "time", "user", "strategy", "status", "question", "answer"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row["_id"],
            _when(row.get("started_at")),
            trace_user(row.get("user")),
            str(row.get("strategy", "")),
            str(row.get("status", "")),
            _short(row.get("question"), 80),
            _short(answer_text(row.get("answer")), 80),
        )
    Console(width=200).print(table)


def trace_user(user: Any) -> str:
    """Who asked, as a trace records it: its owner (``key:<name>/sub:<sub>``, ``cli/sub:<sub>``…), else its
    subject, else ``admin`` for an admin's question (the command line without ``--key``)."""
    if not isinstance(user, Mapping):
        return ""
    return str(user.get("owner") or user.get("subject") or ("admin" if user.get("admin") else ""))


def _when(value: Any) -> str:
    """Return a trace's ``started_at`` to the second, in UTC (``2026-01-02 10:11:12Z``)."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value or "")
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _short(text: Any, width: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@traces.command("purge")
@click.option("--doc", "doc_ids", multiple=True, required=True, help="A passage id (repeatable).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge_traces(doc_ids: tuple[str, ...], yes: bool) -> None:
    """Erase a document everywhere it was copied: delete the traces that quote it (their steps or citations
    name it) and the outline facts derived from it (admin)."""
    if not yes:
        click.confirm(f"Delete every trace and outline fact quoting {', '.join(doc_ids)}?", abort=True)

    async def go() -> tuple[list[str], int]:
        settings = load_settings()
        async with await Store.connect(settings) as store:
            return await outline_purge.purge_traces(store, doc_ids), await outline_purge.purge_outlines(
                store, doc_ids=doc_ids
            )

    try:
        gone, facts = asyncio.run(go())
    except HopsearchError as exc:
        raise _fail(exc) from exc
    click.echo(f"deleted {len(gone)} trace(s) and {facts} outline fact(s) quoting {', '.join(doc_ids)}")


def vectors_check(index: str, meta: dict[str, Any] | None, embedder: Embedder | None, settings: Settings) -> Check:
    """Check what search does with the passages index's vectors under the configured ``embedder``, as search decides it
    (:meth:`~hopsearch.service.retrieval.executor.EsRetriever.embedder_for`): ``ok``; ``??`` (it works, worth knowing);
    ``!!`` (dense and hybrid search refuse the index)."""
    configured = embedder.model_id if embedder is not None else None
    if meta is None:
        return "ok", f"no index [{index}] yet"
    stored = meta.get("embedder")
    if not isinstance(stored, str):
        if configured is None:
            return "ok", f"[{index}] holds no vectors and no embedder is configured: search is BM25 only"
        return "??", (
            f"[{index}] holds no vectors (BM25 only): search is BM25 only (dense and hybrid refused), the "
            f"configured embedder {configured!r} is not used (HOPSEARCH_EMBEDDER=none says so)"
        )
    if configured is None:
        return "??", (
            f"[{index}] holds vectors of {stored!r}, no embedder is configured: search is BM25 only "
            "(dense and hybrid refused; set HOPSEARCH_EMBEDDER to use them)"
        )
    if stored == configured:
        return (
            "ok",
            f"[{index}] holds vectors of {stored!r}, the configured embedder's: dense and hybrid search use them",
        )
    if embedder_for_id(stored, settings, configured=embedder) is not None:
        return "??", (
            f"[{index}] holds vectors of {stored!r}, the configured embedder is {configured!r}: dense and hybrid "
            f"search embed this index's queries with {stored!r}, its own (loads into it too), until it is rebuilt "
            f"(hopsearch index KIND SOURCE --rebuild moves it to {configured!r})"
        )
    return "!!", (
        f"[{index}] holds vectors of {stored!r}, which neither the configured embedder ({configured!r}) nor this "
        "version makes: dense and hybrid search refuse them, questions search it with BM25 (set HOPSEARCH_EMBEDDER "
        "to the embedder that made them, or rebuild it: hopsearch index KIND SOURCE --rebuild)"
    )


async def engine_line(client: LLMClient) -> str:
    """Which server answers and its release (vLLM's ``GET /version``), and how a stop string is read there."""
    engine = await client.engine()
    version = await client.server_version() if engine == "vllm" else None
    fallback = client.settings.llm_stop_fallback
    how = "stop strings from stop_reason" if engine == "vllm" else f"stop strings found by {fallback}"
    return f"{engine}{f' {version}' if version else ''} ({how})"


@click.command("doctor")
def doctor() -> None:
    """Check Java, Elasticsearch, the embedder (what search does with the index's vectors) and the LLM
    server: each line [ok], [??] (works; worth knowing) or [!!] (a problem: exit 1)."""
    settings = load_settings()
    problems = 0

    def report(ok: bool | str, what: str, detail: str) -> None:
        nonlocal problems
        mark = ("ok" if ok else "!!") if isinstance(ok, bool) else ok
        problems += mark == "!!"
        click.echo(f"[{mark}] {what}: {detail}")

    try:
        report(True, "java", str(find_java(settings.java_home, settings.es_version)))
    except HopsearchError as exc:
        report(False, "java", str(exc))
    report(bool(shutil.which("unshare") or shutil.which("setpriv")), "unprivileged start", "unshare/setpriv")

    async def es() -> tuple[str, dict[str, Any] | None]:
        async with await Store.connect(settings) as store:
            caps = store.info.to_dict()["capabilities"]
            try:
                meta: dict[str, Any] | None = await store.index_meta()
            except IndexMissing:
                meta = None
            where = ", ".join(shown_url(url) for url in settings.es_url)
            return f"{store.info.number} at {where} (vectors: {caps['vector_mode']})", meta

    reached = False
    meta: dict[str, Any] | None = None
    try:
        detail, meta = asyncio.run(es())
        report(True, "elasticsearch", detail)
        reached = True
    except HopsearchError as exc:
        report(False, "elasticsearch", str(exc))
    try:
        embedder = make_embedder(settings)
        report(True, "embedder", embedder.model_id if embedder else "none (BM25 only)")
        if reached:
            mark, detail = vectors_check(settings.passages_alias, meta, embedder, settings)
            report(mark, "index vectors", detail)
            note = schema_note(settings.passages_alias, meta or {}, settings.acl_default)
            report("??" if note else "ok", "index schema", note or f"passages schema {SCHEMA_VERSION}")
            if ja_note := ja_tokens_note(settings.passages_alias, meta or {}):
                report("??", "japanese tokens", ja_note)
    except HopsearchError as exc:
        report(False, "embedder", str(exc))

    async def llm() -> tuple[list[LlmProbe], str | None]:
        async with LLMClient(settings) as client:
            probes = await probe_llm(client, settings.health_timeout)
            return probes, await engine_line(client) if any(p.state == "ready" for p in probes) else None

    probes, engine = asyncio.run(llm())
    for probe in probes:
        detail = {"ready": "answered", "busy": "busy (connection open, no answer yet)"}.get(probe.state, "unreachable")
        detail = f"{probe.url} {detail} in {probe.ms:.0f} ms" + (f": {probe.error}" if probe.error else "")
        report(probe.state != "unreachable", "llm", detail)
    if engine is not None:
        report(True, "llm engine", engine)
    if problems:
        raise SystemExit(1)
