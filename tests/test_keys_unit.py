"""The gate's pure parts: which action a route needs, loopback names, query-string credentials, the
per-key request window (on a clock of the test's), and stored keys' secrets stripped from proxied headers."""

from __future__ import annotations

import pytest

from hopsearch.service.api.limits import Accounts, KeyLimiter
from hopsearch.service.api.middleware.gate import loopback_host, loopback_origin, route_action
from hopsearch.service.api.proxy.forwarder import carries_key
from hopsearch.service.auth.records import KeyLimits
from hopsearch.service.errors import TooManyRequests


@pytest.mark.parametrize(
    ("path", "action"),
    [
        ("/hopsearch-passages/_retrieve", "search"),
        ("/passages/_ask", "ask"),
        ("/retrieve", "search"),
        ("/_outlines/_search", "outlines"),
        ("/_outlines/Lethal%20Weapon", "outlines"),
        ("/_traces/abc", "traces"),
        ("/_ui/traces", "traces"),
        ("/_ui/traces/abc", "traces"),
        ("/_keys", "admin"),
        ("/_keys/backend", "admin"),
        ("/_metrics", "admin"),
        ("//_metrics", "admin"),
        ("/", None),
        ("/_mcp/", None),
        ("/hopsearch-passages/_search", None),  # proxied: decided by the proxy (search + index patterns)
    ],
)
def test_route_actions(path: str, action: str | None) -> None:
    assert route_action(path) == action


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        (b"localhost", True),
        (b"LOCALHOST:9280", True),
        (b"127.0.0.1:9280", True),
        (b"[::1]:9280", True),
        (b"[::1]", True),
        (b"localhost.", True),
        (b"localhost.attacker.example", False),
        (b"127.0.0.1.nip.io", False),
        (b"attacker.example:9280", False),
        (b"10.0.0.5", False),
        (b"localhost:80@evil.com", False),
        (b"[::1]evil.com", False),
        (b"[0:0::1]:80", True),
        (b"localhost:99999", False),
        (b"localhost:9280/x", False),
        (b"", False),
        (None, False),
    ],
)
def test_loopback_hosts(host: bytes | None, loopback: bool) -> None:
    assert loopback_host(host) is loopback


def test_loopback_origins() -> None:
    assert loopback_origin(b"http://localhost:5173") and loopback_origin(b"http://[::1]:80")
    assert not loopback_origin(b"null") and not loopback_origin(b"https://attacker.example")
    assert not loopback_origin(b"http://localhost.attacker.example")
    assert not loopback_origin(b"http://localhost:80@evil.com") and not loopback_origin(b"http://[::1]evil.com")


def test_a_keys_window_refuses_past_its_limit_and_opens_again() -> None:
    now = [1000.0]
    limiter = KeyLimiter(clock=lambda: now[0])
    limits = KeyLimits(per_minute=2)
    limiter.request("k", limits)
    now[0] += 10
    limiter.request("k", limits)
    with pytest.raises(TooManyRequests) as refused:
        limiter.request("k", limits)
    assert refused.value.details["retry_after"] == 50  # the first request leaves the window in 50 s
    limiter.request("other", limits)  # another key's own window
    now[0] += 50
    limiter.request("k", limits)
    limiter.request("unlimited", KeyLimits())


def test_concurrent_asks_per_key() -> None:
    limiter = KeyLimiter()
    limiter.request("k", KeyLimits(concurrent_asks=1))
    limiter.admit_ask(Accounts(key="k"))
    with pytest.raises(TooManyRequests, match=r"\[k\] has 1 questions in flight"):
        limiter.admit_ask(Accounts(key="k"))
    limiter.release_ask(Accounts(key="k"))
    limiter.admit_ask(Accounts(key="k"))
    limiter.admit_ask(Accounts())  # an admin: no key limit


def test_stored_secrets_are_never_passed_to_the_cluster() -> None:
    assert carries_key(b"ApiKey hs_abc", [])
    assert carries_key(b"Bearer   hs_abc", [])
    assert carries_key(b"Basic x, hs_abc", [])
    assert not carries_key(b"ApiKey ZWxhc3RpYzpjaGFuZ2VtZQ==", [])
