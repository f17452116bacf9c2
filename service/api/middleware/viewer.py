"""Who a browser is on the trace viewer (:mod:`hopsearch.service.auth.viewer`): the gate reads the viewer's
cookie, and only on the viewer's own reads — ``GET``/``HEAD`` of ``/_ui/traces``, ``/_ui/traces/{id}`` and
the raw trace a page links (``/_traces/{id}``) — where no ``Authorization`` is sent. Every other route ignores
it, so a cookie can never search, ask or write. A one-time code's confirmation page (``GET /_ui/open/{code}``)
and its exchange (that page's ``POST``) need no credentials: the code in its path is the credential (never a
query parameter)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from starlette.requests import cookie_parser
from starlette.types import Scope

from hopsearch.service.access import Caller
from hopsearch.service.auth.viewer import COOKIE

#: The exchange of a one-time code: ``/_ui/open/{code}``.
OPEN_PREFIX = "/_ui/open/"
_VIEWER_READS = re.compile(r"^/(?:_ui/traces(?:/[^/]+)?|_traces/[^/]+)$")
#: Who asks a code's exchange before the code is read: nobody (no principals, no actions, no index).
NOBODY = Caller(indices=(), actions=frozenset())


def viewer_session(scope: Scope, headers: Mapping[bytes, bytes]) -> str | None:
    """Return the viewer's session cookie of a request that may use it (see the module docstring), else None."""
    if scope["method"] not in ("GET", "HEAD") or b"authorization" in headers:
        return None
    if not _VIEWER_READS.match(scope["path"]):
        return None
    cookie = headers.get(b"cookie")
    if cookie is None:
        return None
    return cookie_parser(cookie.decode("latin-1")).get(COOKIE) or None


def is_code_exchange(scope: Scope) -> bool:
    return bool(scope["method"] in ("GET", "HEAD", "POST") and scope["path"].startswith(OPEN_PREFIX))
