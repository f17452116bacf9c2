"""The path of a proxied request, checked and parsed before anything else looks at it.

The allow-list decides on a path and the cluster acts on a path; they must be the same path. A raw
request line such as ``POST /public-docs/../idx/_doc/x`` matched ``/public-docs/**`` while the HTTP
client normalised it to ``/idx/_doc/x`` on its way out (issue 27). So the raw path (as the caller sent
it, percent-escapes and all) is split on ``/`` and each segment decoded as Elasticsearch decodes a path
component (``%XX`` as UTF-8; ``+`` stays ``+``), and a path is refused (400) when it has anything a
server, a proxy or a client on the way could read another way:

- an empty segment (``//``, a trailing ``/``) or a dot segment (``.``, ``..``, also encoded: ``%2E%2E``);
- a ``/`` or ``\\`` inside a segment (``%2F``, ``%5C``, a raw ``\\``);
- an escape that decodes to another escape (``%252F``: double encoding);
- a broken escape, bytes that are not UTF-8, control characters.

What remains is a tuple of plain segments: the allow-list matches them, and the cluster is sent
:attr:`EsRequest.target`, built from those same segments (never the raw path again).

:class:`EsRequest` also says which indices a path names (:attr:`EsRequest.index`, the first segment
when it is an index expression, and :attr:`EsRequest.endpoint`, the rest), so that a policy on indices
(say, hopsearch's own indices only for admins) decides on what Elasticsearch will read, not on a string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote_to_bytes

from hopsearch.service.errors import RequestInvalid

#: Characters a segment keeps unescaped on its way to the cluster (RFC 3986 ``pchar``): index lists
#: (``a,b``) and wildcards (``logs-*``) stay readable in the cluster's logs.
_SAFE = "!$&'()*+,;=:@-._~"
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_BROKEN_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _index_part(part: str) -> bool:
    """One name of an index expression: not an endpoint (``_search``, ``_cluster``), ``_all`` aside."""
    return part == "_all" or (part != "" and not part.startswith("_"))


def names_indices(segment: str) -> bool:
    """Whether a path segment is an index expression (``a``, ``a,b``, ``logs-*``, ``_all``, ``*,-x``):
    Elasticsearch's index names never start with ``_``, its endpoints always do."""
    return all(_index_part(part) for part in segment.split(","))


@dataclass(frozen=True, slots=True)
class EsRequest:
    """A proxied request's method and checked path segments (decoded, none empty, no dot segment)."""

    method: str
    segments: tuple[str, ...]

    @property
    def path(self) -> str:
        """The decoded path, as the allow-list matches it: ``/`` then the segments."""
        return "/" + "/".join(self.segments)

    @property
    def target(self) -> str:
        """The path sent to the cluster: the same segments, each escaped (Elasticsearch decodes each
        back to exactly the segment that was matched)."""
        return "/" + "/".join(quote(segment, safe=_SAFE) for segment in self.segments)

    @property
    def index(self) -> str | None:
        """The index expression the path starts with (``a,b*``), or ``None`` for a path that starts with
        an endpoint (``/_search``: every index the caller may read; ``/_cluster/…``: none)."""
        if self.segments and names_indices(self.segments[0]):
            return self.segments[0]
        return None

    @property
    def indices(self) -> tuple[str, ...]:
        """The names (patterns, ``_all``, ``-exclusions``) of :attr:`index`; empty when it is ``None``.
        Bodies can name more (``_msearch``, ``_mget``): a policy on indices reads those too."""
        return tuple(self.index.split(",")) if self.index is not None else ()

    @property
    def endpoint(self) -> tuple[str, ...]:
        """The segments after the index expression (``("_search",)``, ``("_doc", "1")``), or all of them."""
        return self.segments[1:] if self.index is not None else self.segments


def _refuse(raw: str, why: str) -> RequestInvalid:
    return RequestInvalid(
        f"path [{raw}] {why}; hopsearch passes only plain paths to Elasticsearch "
        "(no empty or dot segments, no encoded `/` or `\\`, no double encoding)",
        field="path",
    )


def _decode(raw: bytes, shown: str) -> str:
    if _BROKEN_ESCAPE.search(raw):
        raise _refuse(shown, "has a `%` that is not followed by two hex digits")
    try:
        text = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(shown, "does not decode to UTF-8") from exc
    if text in (".", ".."):
        raise _refuse(shown, f"has a dot segment ({text!r})")
    if "/" in text or "\\" in text:
        raise _refuse(shown, "has a `\\` or an encoded `/` or `\\` inside a segment")
    if _ESCAPE.search(text):
        raise _refuse(shown, "is encoded twice (an escape decodes to another escape)")
    if _CONTROL.search(text):
        raise _refuse(shown, "has a control character")
    return text


def parse_request(method: str, raw_path: bytes) -> EsRequest:
    """Return the checked request of ``raw_path`` (the path as the caller sent it, before any decoding; the
    query string, if still there, is not part of it). Raises :class:`RequestInvalid` (400)."""
    raw = raw_path.split(b"?", 1)[0]
    shown = raw.decode("latin-1")
    if not raw.startswith(b"/"):
        raise _refuse(shown, "does not start with `/`")
    if raw == b"/":
        return EsRequest(method.upper(), ())
    pieces = raw[1:].split(b"/")
    if any(piece == b"" for piece in pieces):
        raise _refuse(shown, "has an empty segment (`//` or a trailing `/`)")
    return EsRequest(method.upper(), tuple(_decode(piece, shown) for piece in pieces))
