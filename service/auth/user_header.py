"""A key that vouches for its users by a header: a chat front end's one key, each employee by its own rights.

A chat front end (Open WebUI, LibreChat) holds one key per connection and says who asks in a header of
its own (``X-OpenWebUI-User-Email``, a header templated with ``{{LIBRECHAT_USER_EMAIL}}``). A key created
with ``--user-header NAME`` (:attr:`~hopsearch.service.auth.records.KeyRecord.user_header`) takes that
header's value as the request's end user, as a back end's signed token's ``sub`` is taken:

- the owner is ``key:<key>/sub:<value>`` (traces, outline facts and the per-user limits are that user's);
- the principals are ``public``, ``user:<value>`` (the key vouches for the identity) and those of the
  user's stored groups (:mod:`~hopsearch.service.auth.groups`) that the key lists; never an admin's;
- a request without the header is refused (401), never served with the key's own principals; a value
  that is no plausible user id (empty, over :data:`MAX_USER_CHARS`, a wildcard ``*?[]``, a comma, a
  control character, a template the front end left unresolved such as ``{{LIBRECHAT_USER_EMAIL}}``, not
  UTF-8, the header sent twice) is refused (400, naming the header).

On every other key the header means nothing and is never read. The key's secret is therefore every one of
its users' credential: whoever holds it may name any user.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from hopsearch.service.access import PUBLIC, Caller, document_principal, principal
from hopsearch.service.auth.records import KeyRecord
from hopsearch.service.errors import AuthenticationError, InputError, RequestInvalid

#: The longest user id a header may name.
MAX_USER_CHARS = 256
_HEADER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
#: Headers that carry something else: never a user's name.
RESERVED_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "host",
        "origin",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "x-hopsearch-key",
        "x-forwarded-for",
    }
)


def check_header_name(name: str) -> str:
    """Return a ``--user-header`` name as given (an HTTP field name of letters, digits and ``-``, at most 64, none
    of :data:`RESERVED_HEADERS`); an :class:`InputError` naming the field else."""
    name = name.strip()
    if not _HEADER.match(name) or name.lower() in RESERVED_HEADERS:
        raise InputError(
            f"bad user header {name!r}: an HTTP header name of letters, digits and '-' (at most 64), "
            f"none of {', '.join(sorted(RESERVED_HEADERS))}",
            details={"field": "user_header"},
        )
    return name


def header_user(record: KeyRecord, headers: Iterable[tuple[bytes, bytes]]) -> str:
    """Return the end user a request with ``record``'s key names in the key's header; raises the refusal."""
    assert record.user_header is not None
    wanted = record.user_header.lower().encode("latin-1")
    values = [value for name, value in headers if name.lower() == wanted]
    field = f"header.{record.user_header.lower()}"
    if not values:
        raise AuthenticationError(
            f"the API key [{record.name}] vouches for its users by the header [{record.user_header}]: "
            "this request names none (the front end must forward its signed-in user)",
            details={"reason": "user_header_missing"},
        )
    if len(values) > 1:
        why = f"the header [{record.user_header}] is sent {len(values)} times: send it once"
        raise RequestInvalid(why, field=field)
    try:
        user = values[0].decode("utf-8").strip()
    except UnicodeDecodeError:
        raise RequestInvalid(f"the header [{record.user_header}] is not UTF-8 text", field=field) from None
    implausible = _implausible(user)
    if implausible is not None:
        raise RequestInvalid(f"the header [{record.user_header}] names no plausible user: {implausible}", field=field)
    return user


def _implausible(user: str) -> str | None:
    if not user:
        return "it is empty"
    if len(user) > MAX_USER_CHARS:
        return f"{len(user)} characters, more than {MAX_USER_CHARS}"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in user):
        return "it holds a control character"
    if "{{" in user or "}}" in user:  # a front end's template left unresolved (LibreChat's title requests)
        return "it is a template placeholder the front end did not resolve"
    try:
        document_principal(principal(f"user:{user}"))
    except ValueError as exc:
        return str(exc)
    return None


def vouched_caller(record: KeyRecord, user: str, stored_groups: frozenset[str]) -> Caller:
    """Return the caller of ``user``, vouched for by ``record``'s key: ``public``, ``user:<user>`` and the user's
    stored groups that the key lists; never an admin."""
    principals = {PUBLIC, principal(f"user:{user}")} | (stored_groups & record.principals)
    caller = record.caller(principals=frozenset(principals), subject=user)
    return Caller(
        principals=caller.principals,
        admin=False,
        subject=caller.subject,
        key=caller.key,
        indices=caller.indices,
        actions=caller.actions - {"admin"},
        namespace=caller.namespace,
        owner=caller.owner,
    )
