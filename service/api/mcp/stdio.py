"""``hopsearch mcp`` over stdio: whom its tools act as.

The process holds the cluster's own credentials, so it is no security boundary: whoever starts it can read
everything those credentials can. Without a key it acts as an admin, and says so when it starts. With
``HOPSEARCH_MCP_KEY`` (the environment, never argv: arguments show in ``ps``) it acts as that stored key —
its principals, index patterns, actions, limits and owner namespace — and looks the key up again on every
tool call (a lookup is reused at most ``api_key_cache_s``, under a second), so a revoked or expired key
stops it with the key's refusal. An employee's agent belongs on ``hopsearch serve``'s ``/_mcp/`` with the
employee's own key or token, where the service, not the agent's machine, holds the credentials.
"""

from __future__ import annotations

import hmac
from datetime import UTC, datetime

from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.api.mcp.tools import StdioCaller
from hopsearch.service.api.state import ApiState
from hopsearch.service.auth.keys import key_refusal

#: What ``hopsearch mcp`` says on stderr when it acts as an admin.
ADMIN_NOTE = (
    "hopsearch mcp acts as an admin: its tools read every document of every index, whoever the agent works "
    "for (this process holds the cluster's credentials, so it is no security boundary). For an employee's "
    "agent use `hopsearch serve`'s /_mcp/ with the employee's key or token (README: MCP tools for agents); "
    "HOPSEARCH_MCP_KEY makes this process act as a stored key."
)


async def key_caller(state: ApiState, secret: str) -> Caller:
    """Return the caller ``secret`` makes, as the HTTP gate decides it: a flat ``HOPSEARCH_API_KEYS`` key is an admin,
    a stored key its own caller, counted against its requests per minute; an unknown, revoked or expired key
    raises its refusal (recorded as the gate records it)."""
    given = secret.strip().encode("utf-8")
    if any(hmac.compare_digest(given, flat) for flat in state.keys):
        return ADMIN
    record = await (await state.key_store()).by_secret(secret.strip())
    refusal = key_refusal(record, datetime.now(UTC))
    if refusal is not None:
        state.metrics.audit(refusal[0])
        raise refusal[1]
    assert record is not None
    state.limiter.request(record.name, record.limits)
    return record.caller()


def stdio_caller(state: ApiState) -> StdioCaller | None:
    """Whom the stdio tools act as: the key of the ``mcp_key`` setting, looked up on every call; None (an
    admin) without one."""
    if state.settings.mcp_key is None:
        return None
    secret = state.settings.mcp_key.get_secret_value()

    async def caller() -> Caller:
        return await key_caller(state, secret)

    return caller


def acting_note(caller: Caller) -> str:
    """Return what ``hopsearch mcp`` says on stderr about the key it acts as."""
    if caller.admin:
        return "hopsearch mcp acts as an admin (HOPSEARCH_MCP_KEY is an admin key): its tools read everything"
    return (
        f"hopsearch mcp acts as the API key [{caller.key}] (HOPSEARCH_MCP_KEY): principals "
        f"{', '.join(sorted(caller.principals))}; index patterns {', '.join(caller.indices)}; actions "
        f"{', '.join(sorted(caller.actions - {'admin'}))}. The key is checked on every call: revoked or "
        "expired, the tools answer its refusal."
    )
