"""The one settings object. It is the only reader of the environment.

Values come from, highest first: keyword arguments, ``HOPSEARCH_*`` environment variables, the TOML
file named by ``HOPSEARCH_CONFIG`` (optional; :mod:`~hopsearch.service.config.file`), then the defaults
below. Names are read whatever their case, in the environment and in the file. List values (URLs) accept a
comma-separated string in the environment. :func:`load_settings` warns of ``HOPSEARCH_*`` names and
file keys that are no setting (naming the closest) and turns a refused value into one line
(:mod:`~hopsearch.service.config.names`).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from hopsearch.service.config.file import read_config_file, settings_values
from hopsearch.service.config.names import bad_values, unknown_keys, unknown_variables
from hopsearch.service.errors import ConfigError
from hopsearch.service.types import Bm25Query

log = logging.getLogger(__name__)

UrlList = Annotated[list[str], NoDecode]
#: What an IdP token may be signed with, and what an IdP user may do (never ``admin``).
VectorIndex = Literal["auto", "hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "flat", "int8_flat"]
IdpAlgorithm = Literal["RS256", "EdDSA", "ES256"]
IdpAction = Literal["search", "ask", "outlines", "traces"]
#: The default of ``proxy_allow``: reads and searches on indices, nothing cluster- or node-wide (no
#: ``_flush``/``_refresh``, ``_cluster``, ``_nodes``, ``_tasks``, ``_cat``, no index settings): what the
#: official clients' search, count, get, mget, scroll, point-in-time, mapping and exists calls send.
#: ``{index}`` is one segment of index names, never an endpoint (``/_nodes/_search`` does not match).
PROXY_ALLOW_READ = (
    "GET|POST /_search",
    "GET|POST /{index}/_search",
    "GET|POST /_msearch",
    "GET|POST /{index}/_msearch",
    "GET|POST /_search/template",
    "GET|POST /{index}/_search/template",
    "GET|POST /_msearch/template",
    "GET|POST /{index}/_msearch/template",
    "GET|POST /_count",
    "GET|POST /{index}/_count",
    "GET|POST /{index}/_knn_search",
    "GET|POST /{index}/_explain/*",
    "GET|POST /_validate/query",
    "GET|POST /{index}/_validate/query",
    "GET|POST /{index}/_terms_enum",
    "GET|POST /_field_caps",
    "GET|POST /{index}/_field_caps",
    "GET|HEAD /{index}/_doc/*",
    "GET|HEAD /{index}/_source/*",
    "GET|POST /_mget",
    "GET|POST /{index}/_mget",
    "GET /{index}/_mapping",
    "GET /{index}/_mapping/field/*",
    "POST /_search/scroll",
    "DELETE /_search/scroll",
    "POST /{index}/_pit",
    "DELETE /_pit",
    "HEAD /{index}",
)

#: Defaults shared with the strategies' constructors (the registry passes the settings' values in).
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_OUTLINE_NAMESPACE = "default"
DEFAULT_OUTLINE_MAX_AGE_S = 7 * 24 * 3600.0
#: Limits on zip-based documents (.docx, .xlsx, .pptx), checked in the zip directory before anything is
#: inflated. Far above real Office files (a 1,000-page report's document.xml is tens of MB; Office XML
#: deflates 5-50:1) and far below a bomb (zeros deflate about 1,030:1: 2 MB become 2 GB).
DEFAULT_ZIP_MAX_MEMBER_BYTES = 256 * 1024 * 1024
DEFAULT_ZIP_MAX_TOTAL_BYTES = 1024 * 1024 * 1024
DEFAULT_ZIP_MAX_RATIO = 200.0
DEFAULT_ZIP_MAX_MEMBERS = 20_000


#: The ``user:password@`` of a URL (the password is what :func:`shown_url` masks), after its scheme or, in
#: a URL written without one, at the start of the text, a value or a list item.
_USERINFO_PASSWORD = re.compile(r"(?:(?<=://)|^|(?<=[\s,'\"\[]))([^/@\s:,'\"\[]*):[^/\s,'\"]*@")
MASK = "**********"
URL_SCHEMES = ("http", "https")


def checked_url(url: str) -> str:
    """``url`` if it is an ``http://`` or ``https://`` URL with a host; a ``ValueError`` saying what to
    change else (``localhost:9200`` reads as scheme ``localhost``: it is named as a URL with no scheme)."""
    shown = shown_url(url)
    if "://" not in url:
        raise ValueError(f"URL {shown!r} has no scheme: add http:// or https:// (http://{shown})")
    parts = urlsplit(url)
    if parts.scheme.lower() not in URL_SCHEMES:
        raise ValueError(f"URL {shown!r} has the scheme {parts.scheme}: use http:// or https://")
    if not parts.hostname:
        raise ValueError(f"URL {shown!r} has no host")
    return url


def shown_url(url: str) -> str:
    """``url`` as it may be shown or logged: the password of its ``user:password@`` masked
    (``http://elastic:**********@host:9200``); any other text unchanged."""
    return _USERINFO_PASSWORD.sub(rf"\1:{MASK}@", url)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hopsearch`` (``~/.cache/hopsearch``): the ``cache_dir`` setting's default."""
    return Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/hopsearch`` (``~/.local/state/hopsearch``): the ``state_dir`` setting's default."""
    return Path(os.environ.get("XDG_STATE_HOME", str(Path.home() / ".local" / "state"))) / "hopsearch"


class Settings(BaseSettings):
    """hopsearch configuration (environment prefix ``HOPSEARCH_``)."""

    model_config = SettingsConfigDict(env_prefix="HOPSEARCH_", extra="ignore", frozen=True)

    # --- Elasticsearch -------------------------------------------------------------------------
    es_url: UrlList = Field(
        default_factory=list,
        description="Elasticsearch URL(s), comma-separated (default: the local node, http://127.0.0.1:<es_port>).",
    )
    es_api_key: SecretStr | None = Field(None, description="Elasticsearch API key (base64 id:key).")
    es_username: str | None = Field(None, description="Elasticsearch basic-auth user.")
    es_password: SecretStr | None = Field(None, description="Elasticsearch basic-auth password.")
    es_ca_file: Path | None = Field(None, description="CA certificate file for HTTPS clusters.")
    es_verify_certs: bool = Field(True, description="Verify TLS certificates.")
    es_request_timeout: float = Field(30.0, description="Elasticsearch request timeout, seconds.")
    es_max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="Client retries on the next node after a connection error, 429/502/503/504, or a timeout "
        "(timeouts only with several URLs or sniffing).",
    )
    es_sniff: bool = Field(False, description="Discover the cluster's other nodes (sniffing) at start and on failure.")
    es_connections_per_node: int = Field(
        32,
        ge=1,
        le=1024,
        description="Keep-alive connections the client holds per Elasticsearch node: requests beyond it wait for a "
        "free one (the libraries' default, 10, queues a 16-client load inside the service).",
    )
    es_wait_for_active_shards: str | None = Field(
        None,
        description="Shard copies every write waits for, documents and loads (`1`, `2`… or `all`; a load keeps "
        "the replicas `2`… needs); unset: the primary only (Elasticsearch's default).",
    )
    passages_shards: int = Field(1, ge=1, le=1024, description="Primary shards of a new passages index.")
    passages_replicas: int | None = Field(
        None,
        ge=0,
        le=16,
        description="Replicas of a new passages index; unset: 1 where the cluster has more than one data node, else 0.",
    )
    index_prefix: str = Field("hopsearch", description="Prefix of the passages, outlines and traces indices.")
    analyzer: str | None = Field(
        None, description="Text analyzer; default `english` where analysis-common exists, else `standard`."
    )
    ja_synonyms: Path | None = Field(
        None,
        description="A file of company terms that name the same thing, one comma-separated group a line "
        "(`研究開発部, 研開`): a Japanese query naming one term searches BM25 for all of them; DualRAG keys them as "
        "one entity, under the first.",
    )

    # --- embeddings ----------------------------------------------------------------------------
    embedder: Literal["minilm", "e5", "openai", "none"] = Field(
        "minilm",
        description="`minilm` (local CPU all-MiniLM-L6-v2, English), `e5` (local CPU multilingual-e5-small, "
        "Japanese and other languages), `openai` (/v1/embeddings) or `none`.",
    )
    embed_base_url: str | None = Field(None, description="Base URL of an OpenAI-compatible embeddings server.")
    embed_model: str | None = Field(None, description="Embedding model name for the `openai` embedder.")
    embed_api_key: SecretStr | None = Field(None, description="API key for the embeddings server.")
    embed_batch_size: int = Field(64, ge=1, le=4096, description="Texts per embedding batch.")
    embed_dims: int | None = Field(None, description="Dimensions of the `openai` embedder (probed if unset).")
    embed_precision: Literal["auto", "fp32", "int8"] = Field(
        "auto",
        description="Precision of the local embedders (ONNX Runtime): `int8` (dynamic quantisation) or `fp32`; "
        "`auto`: each embedder's measured default (README). Recorded in the embedder id, so an index never "
        "mixes them.",
    )
    embed_concurrency: int = Field(
        4,
        ge=1,
        le=256,
        description="Requests in flight at once on the `openai` embeddings server, over every batch being "
        "embedded (a GPU server batches them together; the loader embeds two loader batches at once).",
    )

    vector_index: VectorIndex = Field(
        "auto",
        description="How new passages indices index their vectors (`index_options.type`): `auto`, the best the "
        "cluster offers (bbq_hnsw with oversampled rescoring for 384+ dimensions on 8.18+, else int8_hnsw on "
        "8.12+, else hnsw; 7.17: no vector index, as before), or `hnsw`, `int8_hnsw`, `int4_hnsw`, `bbq_hnsw`, "
        "`flat`, `int8_flat` (refused at index creation where the version lacks it). Recorded in the index "
        "`_meta` (`vector_index`) and in every dense and hybrid result.",
    )
    knn_num_candidates: int = Field(
        100,
        ge=1,
        le=10_000,
        description="`num_candidates` of a kNN search: at least this many, and at least 10 per hit asked (at most "
        "10,000, Elasticsearch's limit).",
    )
    knn_oversample: float = Field(
        3.0,
        ge=0,
        le=100,
        description="`rescore_vector.oversample` of kNN searches over bbq_hnsw and int4_hnsw indices (8.18+): that "
        "many times k candidates are rescored with the float vectors; 0: no rescoring (and `auto` then "
        "picks int8_hnsw).",
    )

    # --- retrieval -----------------------------------------------------------------------------
    bm25_query: Bm25Query = Field(
        "most_fields",
        description="The `multi_match` type of BM25 over a passage's title and text: `most_fields` (the "
        "fields' scores added up), which lets Lucene skip blocks that cannot compete: BM25 10x faster on all "
        "21M Wikipedia passages (docs/capacity.md), or `best_fields` (with `tie_breaker` 0.5, DeepRAG's "
        "retriever); recall measured in the README (Retrieval, Multi-hop retrieval).",
    )
    retrieval_mode: Literal["bm25", "dense", "hybrid"] = Field(
        "hybrid",
        description="Retrieval mode of the strategies unless a request sets one; bm25 where the index holds "
        "no vectors of the embedder (hybrid won on the shared 2Wiki questions: README, `hopsearch eval retrieval`). "
        "Left unset, DualRAG keeps BM25 for its keyword queries (measured better for them).",
    )
    hops: Literal[0, 1] = Field(
        0,
        description="Hops of the strategies' retrievals unless a request sets one: 1 also follows the names "
        "that the question and the first-hop passages name, to the passages they title or other documents "
        "that hold them (README, Multi-hop retrieval).",
    )
    hops_names: bool = Field(
        False,
        description="The second hop of a Japanese question over passages that hold `names` looks those names up "
        "(one terms query on the chunks' names: 2.5x one BM25 search, against 5x for the mention search) instead "
        "of the mention search. Off by default: on the third Japanese corpus, held out from tuning, it found less "
        "(hybrid recall@5 0.867 against 0.917; README, Multi-hop retrieval).",
    )
    seed: bool | None = Field(
        None,
        description="Start every strategy's run with the question's own retrieval (its mode and hops), whose "
        "passages stay in the answer's context and citations, unless a request says: true or false for all; "
        "unset: each strategy's default (README, Strategies). Never DeepRAG's `never` policy nor "
        "`max_retrievals` 0.",
    )
    rerank_url: str | None = Field(
        None, description="Base URL of a reranker speaking the common `/rerank` shape (vLLM, TEI, Jina, Cohere)."
    )
    rerank_model: str | None = Field(None, description="Model name sent to the reranker.")
    rerank_api_key: SecretStr | None = Field(None, description="API key for the reranker.")
    rerank_top_n: int = Field(20, ge=1, le=1000, description="Hits of a query the reranker reorders.")

    # --- LLM -----------------------------------------------------------------------------------
    llm_base_url: UrlList = Field(
        default_factory=list,
        description="OpenAI-compatible LLM base URL(s), comma-separated; calls are spread over them "
        "(default: the local server, http://127.0.0.1:<llm_port>/v1).",
    )
    llm_model: str = Field("gemma3-270m", description="Model name sent to the LLM server.")
    llm_api_key: SecretStr | None = Field(None, description="API key for the LLM server.")
    llm_engine: Literal["auto", "vllm", "llamacpp", "openai"] = Field(
        "auto", description="Server kind; `auto` detects vLLM by its `stop_reason` field."
    )
    llm_timeout: float = Field(60.0, gt=0, description="Per-request LLM timeout, seconds.")
    llm_retries: int = Field(3, ge=0, le=10, description="Retries on connect errors, 429 and 5xx.")
    llm_max_concurrency: int = Field(8, ge=1, description="Concurrent LLM requests per service process.")
    llm_slots_per_url: int = Field(
        0,
        ge=0,
        description="Requests in flight per LLM base URL from one service process; the rest wait in it, and "
        "that wait does not count toward llm_timeout. 0: the server's own slot count where it reports one (llama.cpp "
        "`/props` total_slots), else no limit beyond llm_max_concurrency.",
    )
    llm_question_slots: int = Field(
        0,
        ge=0,
        description="Questions (of one service process) whose LLM calls may interleave on the server; the others "
        "wait their turn (a question's prompts extend one another, and a server with one slot keeps only"
        " the last prompt: interleaved questions evaluate every prompt from the start). 0: for llama.cpp"
        " the servers' slot counts added up (one for a server that reports none: llama-cpp-python has "
        "one slot), no limit for vLLM and OpenAI (they batch and cache prefixes).",
    )
    llm_backoff_base: float = Field(0.5, ge=0, description="First retry back-off, seconds (doubles, jittered).")
    llm_backoff_max: float = Field(8.0, ge=0, description="Longest retry back-off, seconds.")
    llm_deadline: float = Field(DEFAULT_TIMEOUT_S, gt=0, description="Overall deadline of one question, seconds.")
    llm_balance: Literal["least-busy", "round-robin"] = Field(
        "least-busy", description="How calls are spread over several LLM base URLs."
    )
    llm_stop_fallback: Literal["stream", "followup", "cut"] = Field(
        "stream",
        description="Where the server does not report `stop_reason`: stream without the stop strings and "
        "stop reading at the first marker (one request), read the marker with a short follow-up "
        "completion, or generate without the stop strings to `max_tokens` and cut client-side.",
    )
    answer_type_model: bool = Field(
        False,
        description="Where the rules cannot tell a question's answer type (free text), ask the model in one "
        "constrained call (a date, a number, yes or no, or a name) and constrain the final answer to it.",
    )

    # --- HTTP service (`hopsearch serve`) ---------------------------------------------------------
    api_host: str = Field("127.0.0.1", description="Address `hopsearch serve` listens on.")
    api_port: int = Field(9280, ge=1, le=65535, description="Port `hopsearch serve` listens on.")
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="API keys accepted by the HTTP service (`Authorization: ApiKey <key>` or "
        "`Bearer <key>`), comma-separated; empty: no authentication (loopback only).",
    )
    api_max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body, bytes (413).")
    api_body_timeout_s: float = Field(
        30.0, gt=0, description="Longest wait for a request's whole body once its headers arrived, seconds (408)."
    )
    api_shared_limits_file: str | None = Field(
        None,
        description="The file the workers of one `hopsearch serve --workers N` share keys' requests per minute "
        "through (set by `serve` itself; leave unset).",
    )
    api_max_question_chars: int = Field(2000, ge=1, description="Longest question, characters (400).")
    api_max_k: int = Field(100, ge=1, le=10_000, description="Largest `k` (and `size`) a request may ask.")
    api_max_concurrent_asks: int = Field(
        8, ge=1, description="`_ask` requests one service process serves at once; more are refused with 429."
    )
    api_max_queries: int = Field(1024, ge=1, description="Queries one Search-R1 `POST /retrieve` batch may hold.")
    retrieve_mode: Literal["bm25", "dense", "hybrid"] = Field(
        "bm25", description="Retrieval mode of the Search-R1 `POST /retrieve` route (a request may override it)."
    )
    retrieve_topk: int = Field(3, ge=1, description="`topk` of a Search-R1 `POST /retrieve` request that names none.")
    proxy_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(PROXY_ALLOW_READ),
        description="Requests the service passes on to Elasticsearch (with the caller's own credentials), as "
        "`METHOD /path` patterns on the decoded path (`*` within one segment, `**` any rest, `{index}` one "
        "segment of index names, `GET|POST` several methods), comma-separated; others are refused with 403. "
        "Default: reads and searches on indices only (listed in the README).",
    )

    health_timeout: float = Field(
        3.0,
        gt=0,
        description="Seconds /_health and `doctor` wait for each dependency; an LLM server that keeps the "
        "connection open longer is reported busy (ready), not down.",
    )

    api_source_fields: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Source fields a `_retrieve` hit returns (dotted names, comma-separated, e.g. "
        "`title,text,path`); empty: every field but the hidden ones. A field left out is left out of the "
        "hit's `hopsearch` title, text and excerpt, `/retrieve` and MCP too.",
    )
    api_hidden_fields: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Source fields a `_retrieve` hit never returns (dotted names, comma-separated), nor its "
        "`hopsearch` title, text and excerpt, `/retrieve` or MCP.",
    )
    api_server_paths: bool = Field(
        False,
        description="Return server paths as indexed (absolute `path`, `file:` `url`, `metadata.root`); "
        "off: `path` relative to the indexed folder, no `file:` URL and no root.",
    )
    api_retry_after_s: int = Field(1, ge=0, description="`Retry-After` seconds sent with a 429.")
    api_key_cache_s: float = Field(
        0.5,
        ge=0,
        le=0.9,
        description="Seconds a service process reuses what it read of a stored API key (`<prefix>-keys`); "
        "a revoked key is refused by every process within this (and always within one second). 0: read on "
        "every request.",
    )
    mcp_key: SecretStr | None = Field(
        None,
        description="The stored API key `hopsearch mcp` (stdio) acts as: its principals, index patterns, actions "
        "and owner namespace, looked up on every tool call (revoked, the tools answer its refusal within a "
        "second). Unset: as an admin (the process holds the cluster's credentials). Never a command-line argument.",
    )
    ui_code_s: float = Field(
        300.0,
        gt=0,
        le=3600,
        description="Seconds a one-time URL of the trace viewer (`hopsearch traces show ID --open`, `POST "
        "/_traces/{id}/_open`) may wait to be opened; it works once.",
    )
    ui_session_s: float = Field(
        3600.0,
        gt=0,
        le=86400,
        description="Seconds the viewer's cookie (what a one-time URL is exchanged for) lasts; it stops at once "
        "when its key is revoked or expires.",
    )
    api_sse_heartbeat_s: float = Field(
        15.0, gt=0, description="A `: keep-alive` comment goes out after this many seconds of SSE silence."
    )
    api_graceful_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds `serve` waits on SIGTERM for open requests to end before it cancels them (streams "
        "end at once: each is sent a closing `service_stopping_exception`).",
    )

    # --- document permissions ------------------------------------------------------------------
    acl_default: Literal["private", "public"] = Field(
        "private",
        description="How passages without `acl` read (loaded without permissions, or into an index made before "
        "them), decided at search time: `private`, admins only; `public`, every caller.",
    )
    api_non_admin_scores: Literal["scores", "ranks"] = Field(
        "scores",
        description="What non-admin callers get as a hit's score on every route: Elasticsearch's `scores`, or "
        "`ranks` (1/rank: 1.0, 0.5, 0.333…), since BM25 statistics count passages a caller cannot read.",
    )
    vector_cache_mb: int = Field(
        1024,
        ge=0,
        description="Size bound of the local vector cache (`<cache_dir>/vectors.sqlite3`, by embedder and text) "
        "that lets a load re-send unchanged passages (an ACL change) without embedding them again; 0: off.",
    )

    # --- end-user tokens and groups ------------------------------------------------------------
    token_max_ttl_s: float = Field(
        3600.0,
        gt=0,
        description="A back end's end-user token (a JWT signed with a key's registered public key) may expire at "
        "most this many seconds after it is checked; one with a later `exp` is refused.",
    )
    token_max_principals: int = Field(
        64,
        ge=1,
        le=10_000,
        description="Most principals (and IdP groups) one end-user token may carry; more are refused: keep large "
        "group sets in the groups index (`hopsearch groups`).",
    )
    token_principals_claim: str = Field(
        "principals", min_length=1, description="The claim of a back end's token that lists the end user's principals."
    )
    token_leeway_s: float = Field(
        30.0, ge=0, le=300, description="Clock skew allowed when checking a token's `exp`, `nbf` and `iat`, seconds."
    )
    idp_issuer: str | None = Field(
        None,
        description="The company IdP's issuer (`iss`): a token whose `iss` equals it is checked against the IdP's "
        "JWKS (`idp_jwks`); unset: no IdP tokens.",
    )
    idp_audience: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Audiences (`aud`) an IdP token must name one of, comma-separated (required with `idp_issuer`).",
    )
    idp_jwks: str | None = Field(
        None,
        description="The IdP's signing keys: a JWKS file (read at start) or an `https://` URL (fetched, kept "
        "`idp_jwks_refresh_s`, fetched again for an unknown `kid`).",
    )
    idp_jwks_refresh_s: float = Field(
        3600.0, ge=1, description="Seconds the keys fetched from an `idp_jwks` URL are used before a fetch again."
    )
    idp_algorithms: Annotated[list[IdpAlgorithm], NoDecode] = Field(
        default_factory=lambda: list[IdpAlgorithm](["RS256"]),
        min_length=1,
        description="Algorithms an IdP token may be signed with (`RS256`, `EdDSA`, `ES256`), comma-separated.",
    )
    idp_groups_claim: str = Field(
        "groups", min_length=1, description="The IdP token's claim that lists the user's groups (each `group:<name>`)."
    )
    idp_subject_claim: str = Field(
        "sub",
        min_length=1,
        description="The IdP token's claim that names the user (`user:<name>`, whom traces belong to; Entra ID: "
        "`oid` or `preferred_username`).",
    )
    idp_max_ttl_s: float = Field(
        86_400.0, gt=0, description="An IdP token may expire at most this many seconds after it is checked."
    )
    idp_indices: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["*"],
        min_length=1,
        description="Index patterns IdP users may search and ask, comma-separated.",
    )
    idp_actions: Annotated[list[IdpAction], NoDecode] = Field(
        default_factory=lambda: list[IdpAction](["search", "ask", "outlines", "traces"]),
        description="What IdP users may do (`search`, `ask`, `outlines`, `traces`; never `admin`), comma-separated.",
    )
    idp_per_minute: int | None = Field(
        None,
        ge=1,
        description="Requests one IdP user may make a minute (each user counted apart, by issuer and subject; "
        "shared by the workers of one `serve`; a key's `per_minute` for IdP users); unset: no limit, as for a key.",
    )
    idp_concurrent_asks: int | None = Field(
        None,
        ge=1,
        description="`_ask` requests one IdP user may have in flight (a key's `concurrent_asks` for IdP users); "
        "unset, or more: each user's fair share, half of `api_max_concurrent_asks` (rounded up), as for a key.",
    )
    groups_cache_s: float = Field(
        2.0,
        ge=0,
        description="Seconds a user's groups read from the groups index (`<prefix>-groups`) are reused by a "
        "service process (0: read on every request).",
    )

    # --- strategies ----------------------------------------------------------------------------
    outline_namespace: str = Field(
        DEFAULT_OUTLINE_NAMESPACE,
        min_length=1,
        description="DualRAG outlines are stored and reused within this namespace.",
    )
    outline_max_age_s: float = Field(
        DEFAULT_OUTLINE_MAX_AGE_S,
        ge=0,
        description="DualRAG reuses stored facts younger than this many seconds (0: never reuse).",
    )
    outline_persist: bool = Field(True, description="DualRAG writes its outlines to the outlines index.")
    hyde_decompose: bool = Field(True, description="HyDE strategy: split the question into 1-3 sub-queries.")
    hyde_hypothetical: bool = Field(
        True, description="HyDE strategy: search with a hypothetical answer passage per sub-query."
    )

    # --- document loading (`index docs`) -------------------------------------------------------
    zip_max_member_bytes: int = Field(
        DEFAULT_ZIP_MAX_MEMBER_BYTES,
        ge=1,
        description="Largest uncompressed member of a .docx, .xlsx or .pptx file (zip directory, read before "
        "anything is inflated); a file over it is dead-lettered, the others load.",
    )
    zip_max_total_bytes: int = Field(
        DEFAULT_ZIP_MAX_TOTAL_BYTES,
        ge=1,
        description="Largest uncompressed size of all members of a .docx, .xlsx or .pptx file together "
        "(the Office libraries hold every part in memory).",
    )
    zip_max_ratio: float = Field(
        DEFAULT_ZIP_MAX_RATIO,
        gt=1,
        description="Largest compression ratio (uncompressed / compressed) of a member over 1 MiB of a .docx, "
        ".xlsx or .pptx file.",
    )
    zip_max_members: int = Field(
        DEFAULT_ZIP_MAX_MEMBERS, ge=1, description="Most members (parts) a .docx, .xlsx or .pptx file may hold."
    )

    docs_max_text_mb: float = Field(
        256.0,
        gt=0,
        description="Most text (MiB of characters) one file may yield once extracted; a file over it is "
        "dead-lettered with the reason and the rest of the folder loads (extraction and chunking take time "
        "in proportion to it).",
    )

    # --- local services ------------------------------------------------------------------------
    es_version: str = Field("8.19.21", description="Version of the local Elasticsearch node (`es up`).")
    es_home: Path | None = Field(None, description="An unpacked Elasticsearch distribution to run instead.")
    es_port: int = Field(9200, description="HTTP port of the local Elasticsearch node.")
    es_heap: str = Field("512m", description="Heap of the local Elasticsearch node.")
    java_home: Path | None = Field(None, description="JDK for the local node (default: found under /usr/lib/jvm).")
    llm_port: int = Field(8080, description="Port of the local llama.cpp server (`llm up`).")
    llm_ctx: int = Field(4096, ge=256, description="Context length of the local LLM server (`llm up`).")
    llm_startup_timeout: float = Field(
        180.0, gt=0, description="Seconds `llm up` waits for /v1/models (vLLM: at least 900)."
    )
    llm_vllm_dtype: Literal["bfloat16", "float32"] = Field(
        "bfloat16",
        description="Weights of the Gemma model `llm up --engine vllm` converts and serves (bfloat16: measured "
        "faster on CPU; float32 keeps the GGUF's dequantized values exactly).",
    )
    llm_vllm_max_model_len: int = Field(
        2048, ge=256, description="Context length of the local vLLM server (`llm up --engine vllm`)."
    )
    llm_vllm_kvcache_gib: int = Field(
        2, ge=1, description="GiB of memory the local vLLM server keeps for its KV cache (VLLM_CPU_KVCACHE_SPACE)."
    )
    cache_dir: Path = Field(default_factory=default_cache_dir, description="Downloads (ES zips) and built ONNX graphs.")
    state_dir: Path = Field(default_factory=default_state_dir, description="Local node data, logs, pid files.")

    @field_validator("es_url", "llm_base_url", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [checked_url(part.strip().rstrip("/")) for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            return [checked_url(str(part).strip().rstrip("/")) for part in value]
        return value

    @field_validator("embed_base_url", "rerank_url", mode="before")
    @classmethod
    def _check_url(cls, value: Any) -> Any:
        return checked_url(value.strip()) if isinstance(value, str) and value.strip() else value

    @model_validator(mode="after")
    def _local_defaults(self) -> Settings:
        # The URLs default to the local services, whose ports are settings too.
        if not self.es_url:
            object.__setattr__(self, "es_url", [f"http://127.0.0.1:{self.es_port}"])
        if not self.llm_base_url:
            object.__setattr__(self, "llm_base_url", [f"http://127.0.0.1:{self.llm_port}/v1"])
        return self

    @field_validator("proxy_allow", mode="before")
    @classmethod
    def _split_patterns(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator(
        "api_keys",
        "api_source_fields",
        "api_hidden_fields",
        "idp_audience",
        "idp_algorithms",
        "idp_indices",
        "idp_actions",
        mode="before",
    )
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("HOPSEARCH_CONFIG")
        if config_file:
            values = settings_values(read_config_file(Path(config_file)))
            sources.append(InitSettingsSource(settings_cls, init_kwargs=values))
        return tuple(sources)

    # --- derived names -------------------------------------------------------------------------
    @property
    def passages_alias(self) -> str:
        return f"{self.index_prefix}-passages"

    @property
    def outlines_index(self) -> str:
        return f"{self.index_prefix}-outlines"

    @property
    def traces_index(self) -> str:
        return f"{self.index_prefix}-traces"

    @property
    def groups_index(self) -> str:
        """Users' groups (``hopsearch groups``), added to their principals server-side."""
        return f"{self.index_prefix}-groups"

    @property
    def keys_index(self) -> str:
        return f"{self.index_prefix}-keys"

    @property
    def attached_index(self) -> str:
        """Where the field maps of attached indices are kept (issue 30: indices users already have)."""
        return f"{self.index_prefix}-attached"


def load_settings(**overrides: Any) -> Settings:
    """Read the settings (environment, optional TOML file) with explicit overrides on top. Names that
    are no setting are logged as warnings; refused values, and a named file that is missing or no TOML,
    are a :class:`ConfigError` of one line each."""
    fields = frozenset(Settings.model_fields)
    config_file = os.environ.get("HOPSEARCH_CONFIG")
    written = read_config_file(Path(config_file)) if config_file else {}
    in_file = settings_values(written)
    for warning in (*unknown_variables(os.environ, fields), *unknown_keys(written, fields, str(config_file))):
        log.warning("%s", warning)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        variables = {name.upper(): name for name in os.environ}

        def where(field: str) -> tuple[str, str]:
            variable = variables.get(f"HOPSEARCH_{field.upper()}")
            if field not in overrides and variable is not None:
                return variable, ""
            return field, f" in {config_file}" if field not in overrides and field in in_file else ""

        raise ConfigError(bad_values(exc.errors(), where, _shown_value)) from exc
    except SettingsError as exc:
        raise ConfigError(f"bad setting: {exc}") from exc


def _shown_value(field: str, value: Any) -> str:
    info = Settings.model_fields.get(field)
    if info is not None and "SecretStr" in str(info.annotation):
        return MASK
    text = shown_url(repr(value))
    return text if len(text) <= 200 else text[:200] + "…"
