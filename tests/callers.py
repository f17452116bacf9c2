"""An app served as one fixed caller, for tests: the caller is put into every request's ASGI scope
where the authentication puts it (:data:`~hopsearch.service.api.state.CALLER_KEY`), so a test can
make a non-admin caller without keys or tokens. Test-only: the product never wraps an app so."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from hopsearch.service.access import Caller
from hopsearch.service.api.state import CALLER_KEY

#: A caller that is not an admin (what a stored key or an end-user token of an employee makes).
ALICE = Caller.of(
    ["user:alice", "group:staff", "public"], subject="alice", key="backend", owner="key:backend/sub:alice"
)


def as_caller(app: ASGIApp, caller: Caller) -> ASGIApp:
    """``app`` with every HTTP request made by ``caller``."""

    async def served(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, CALLER_KEY: caller}
        await app(scope, receive, send)

    return served
