"""What the app keeps between requests: one :class:`~hopsearch.service.app.runtime.Runtime` (store,
embedder, LLM client, trace sink — opened once, lazily, and reused by every request and every index),
the mapping of index names in URLs onto the passages alias, and the slots for concurrent questions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Path, Request

from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.api.limits import NOWHERE, Accounts, KeyLimiter, SharedWindows, accounts_of, fair_share
from hopsearch.service.api.metrics import Metrics
from hopsearch.service.api.models import AskRequest as AskBody
from hopsearch.service.api.responses import Redactor
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.auth.groups import EsGroups
from hopsearch.service.auth.keys import KeyStore
from hopsearch.service.auth.records import KeyLimits, TokenVerifier
from hopsearch.service.auth.tokens import JwtVerifier, token_verifier
from hopsearch.service.auth.viewer import ViewerSessions
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import TooManyRequests
from hopsearch.service.requests import HTTP_ASK, AskRequest, Fields
from hopsearch.service.retrieval.hit_sources import HitSources
from hopsearch.service.strategies import Answer, StepListener

log = logging.getLogger(__name__)
VERSION = "0.1.0"
#: An index named in a URL (``/{index}/_retrieve``, ``/{index}/_ask``).
IndexName = Annotated[str, Path(min_length=1, max_length=255, description="The passages alias or a version")]


class AskSlot:
    """One admitted question; :meth:`release` is idempotent (a stream and its cleanup both call it)."""

    def __init__(self, state: ApiState, accounts: Accounts = NOWHERE) -> None:
        self._state = state
        self._accounts = accounts
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._state.asks_in_flight -= 1
            self._state.metrics.asks_in_flight.dec()
            self._state.limiter.release_ask(self._accounts)


class ApiState:
    def __init__(self, settings: Settings, runtime: Runtime | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.redact = Redactor.for_settings(settings)
        self.hit_sources = HitSources(settings)
        self.keys = [key.get_secret_value().encode() for key in settings.api_keys]
        self.asks_in_flight = 0
        #: Per-key and per-user limits (requests per minute shared by the workers of one ``serve``,
        #: questions in flight), and each IdP user's (:meth:`accounts`).
        shared = SharedWindows(settings.api_shared_limits_file) if settings.api_shared_limits_file else None
        self.limiter = KeyLimiter(shared=shared)
        self.user_limits = KeyLimits(settings.idp_concurrent_asks, settings.idp_per_minute)
        #: The verifier of end-user tokens (JWTs sent as ``Bearer``): back ends' tokens, checked against the
        #: stored keys, and the IdP's where ``idp_issuer`` is set. None: none are accepted (an embedding
        #: program may set its own).
        self.tokens: TokenVerifier | None = StateTokens(self)
        self._verifier: JwtVerifier | None = None
        self._key_store: KeyStore | None = None
        self._groups: EsGroups | None = None
        self._stopping: asyncio.Event | None = None
        self._runtime = runtime
        self._owns_runtime = runtime is None
        self._lock = asyncio.Lock()

    async def runtime(self) -> Runtime:
        """Return the shared runtime; opened on first use (Elasticsearch may come up after the service)."""
        if self._runtime is not None:
            return self._runtime
        async with self._lock:
            if self._runtime is None:
                self._runtime = await Runtime.open(self.settings)
                log.info("connected to Elasticsearch %s", self._runtime.store.info.number)
            return self._runtime

    def stopping(self) -> asyncio.Event:
        """Set when the service is told to stop (:func:`~hopsearch.service.api.app.stop_on_signals`): what
        streams and waits ends at once, so the process exits within its graceful timeout."""
        if self._stopping is None:
            self._stopping = asyncio.Event()
        return self._stopping

    async def key_store(self) -> KeyStore:
        """Return the stored API keys (``<prefix>-keys``) over the shared runtime's store."""
        if self._key_store is None:
            self._key_store = KeyStore.of((await self.runtime()).store, self.settings.api_key_cache_s)
        return self._key_store

    async def groups(self) -> EsGroups:
        """Return the users' stored groups (``<prefix>-groups``) over the shared runtime's store, made once."""
        if self._groups is None:
            self._groups = EsGroups((await self.runtime()).store, cache_s=self.settings.groups_cache_s)
        return self._groups

    async def viewer_sessions(self) -> ViewerSessions:
        """Return the trace viewer's one-time codes and cookie sessions, over the stored keys."""
        settings = self.settings
        groups = await self.groups()
        return ViewerSessions(await self.key_store(), settings.ui_code_s, settings.ui_session_s, groups, settings)

    async def question_of(self, caller: Caller, index: str, body: AskBody, fields: Fields = HTTP_ASK) -> AskRequest:
        """Build the checked question of an ``_ask`` body over the index a URL (or a chat model's name) names.

        Every front end that takes ``_ask``'s body (``/v1/chat/completions`` too) builds its question here; the
        use case resolves and checks the index (:func:`~hopsearch.service.app.usecases.ask_request`).
        """
        opts = body.options
        return await usecases.ask_request(
            await self.runtime(),
            body.question,
            caller=caller,
            strategy=body.strategy,
            index=index,
            filters=opts.filters,
            k=opts.k,
            retrieval_mode=opts.retrieval_mode,
            hops=opts.hops,
            seed=opts.seed,
            mode=opts.mode,
            max_depth=opts.max_depth,
            max_tokens=opts.max_tokens,
            budget=opts.budget.to_budget(),
            fields=fields,
        )

    def accounts(self, caller: Caller) -> Accounts:
        """Where ``caller``'s requests and questions count: its key's and its owner's (:func:`accounts_of`)."""
        return accounts_of(caller, self.user_limits)

    def admit_question(self, caller: Caller | None = None) -> AskSlot:
        """Return a slot for one question: 429 at the service's ``api_max_concurrent_asks``, or at the limit of
        questions in flight of one of the caller's accounts (:meth:`accounts`): its key's own or its fair
        share of the service's (half, :func:`fair_share`), its user's own or fair share (of the key's, or of
        the service's for a user no key vouches for)."""
        limit = self.settings.api_max_concurrent_asks
        if self.asks_in_flight >= limit:
            raise TooManyRequests(
                f"rejected execution: {self.asks_in_flight} questions in flight (limit {limit}); retry later"
            )
        accounts = self.accounts(caller) if caller is not None else NOWHERE
        try:
            self.limiter.admit_ask(accounts, fair_share(limit))
        except TooManyRequests:
            self.metrics.audit("rate_limited")
            raise
        self.asks_in_flight += 1
        self.metrics.asks_in_flight.inc()
        return AskSlot(self, accounts)

    async def answer(
        self, request: AskRequest, *, slot: AskSlot | None = None, on_step: StepListener | None = None
    ) -> Answer:
        """Run the ask use case in an admitted slot (``slot``, or one admitted here), counted in the metrics."""
        slot = slot or self.admit_question(request.scope.caller)
        try:
            answer = await usecases.ask(await self.runtime(), request, on_step=on_step)
        finally:
            slot.release()
        self.metrics.question(request.strategy, "error" if answer.error else "ok", answer.trace.totals())
        return answer

    async def token_verifier(self) -> JwtVerifier:
        """Return the service's token verifier over the stored keys and groups, made on first use (it reads the IdP's
        JWKS file, and the keys and groups live in Elasticsearch, which may come up after the service)."""
        if self._verifier is None:
            made = token_verifier(self.settings, await self.key_store(), await self.groups())
            assert isinstance(made, JwtVerifier)  # a key lookup is given: back ends' tokens always apply
            self._verifier = made
        return self._verifier

    async def close(self) -> None:
        if self._verifier is not None:
            await self._verifier.aclose()
            self._verifier = None
        if self._runtime is not None and self._owns_runtime:
            await self._runtime.close()
        self._runtime = None


class StateTokens:
    """The service's :class:`TokenVerifier`: :meth:`ApiState.token_verifier`'s, made on the first token."""

    def __init__(self, state: ApiState) -> None:
        self._state = state

    async def verify(self, token: str) -> Caller:
        return await (await self._state.token_verifier()).verify(token)


#: The key of an ASGI scope under which the authenticated :class:`Caller` of the request lies (only the
#: server and the service's own middleware write a scope, never a client).
CALLER_KEY = "hopsearch.caller"
#: Where the gate puts when the credential of the request ends (an end-user token's ``exp``), if it does:
#: a viewer code or session minted from it ends no later (:mod:`hopsearch.service.auth.viewer`).
CREDENTIAL_UNTIL_KEY = "hopsearch.credential_until"


def caller_of(scope: Mapping[str, Any]) -> Caller:
    """Who makes the request of this ASGI ``scope``: the caller put under :data:`CALLER_KEY` (a stored
    key's, an end-user token's), else an admin (the flat ``HOPSEARCH_API_KEYS`` are admin keys, and an
    open loopback service serves admins)."""
    caller = scope.get(CALLER_KEY)
    return caller if isinstance(caller, Caller) else ADMIN


def state_of(request: Request) -> ApiState:
    """Return the app's state (every route's way to the runtime, limits and settings)."""
    state: ApiState = request.app.state.api
    return state
