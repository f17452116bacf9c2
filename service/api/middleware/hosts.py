"""``Host`` and ``Origin`` read strictly (RFC 9110 §7.2: ``uri-host [ ":" port ]``; RFC 6454's
``scheme "://" host [ ":" port ]``): what an open service (no keys) answers only on loopback names. A
value with anything else — userinfo (``localhost:80@evil.com``), text after an IP literal
(``[::1]evil.com``), a path, a bad port — names no host, so it is not loopback; nor is a request with more
than one ``Host`` header or more than one ``Origin``."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

#: The names an open service answers (an IPv6 literal is compared as an address: ``[0:0::1]`` is ``::1``).
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
#: uri-host (an IP literal, or a reg-name of unreserved characters: letters, digits, ``-``, ``.``) and port.
_HOST = re.compile(r"(?:\[(?P<literal>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::(?P<port>[0-9]{0,5}))?")
_ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#]*)")


def host_of(text: str) -> str | None:
    """Return the host a ``Host`` value (``uri-host [":" port]``) names, lower-cased, an IPv6 literal without its
    brackets and in its short form; None where the value is not of that form."""
    found = _HOST.fullmatch(text.strip().lower())
    if found is None or (found["port"] and int(found["port"]) > 65535):
        return None
    if found["literal"] is not None:
        try:
            return str(ipaddress.IPv6Address(found["literal"]))
        except ValueError:
            return None
    return str(found["name"])


def is_loopback(host: str | None) -> bool:
    return host is not None and host.rstrip(".") in LOOPBACK_NAMES


def loopback_host(value: bytes | None) -> bool:
    """Whether a ``Host`` header names a loopback host (``localhost``, ``127.0.0.1``, ``[::1]``, any port)."""
    return bool(value) and value is not None and is_loopback(host_of(value.decode("latin-1")))


def loopback_origin(value: bytes) -> bool:
    """Whether an ``Origin`` is ``http(s)://`` a loopback host, with a port or not (nothing else)."""
    found = _ORIGIN.fullmatch(value.decode("latin-1").strip().lower())
    return found is not None and is_loopback(host_of(found["authority"]))


def only_one(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> tuple[int, bytes | None]:
    """How many ``name`` headers a request has, and the one value where it has exactly one."""
    values = [value for key, value in headers if key.lower() == name]
    return len(values), values[0] if len(values) == 1 else None
