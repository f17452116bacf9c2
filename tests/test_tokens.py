"""End-user tokens (issue 28): a back end's JWT signed with a key's registered public key, and the company
IdP's checked against its JWKS (a file, and a URL served by a real local HTTP server). Real keys from
``cryptography``; the key store is an in-memory :class:`KeyLookup` (our own seam), the groups a small
:class:`GroupLookup` (the Elasticsearch one is tests/test_groups_es.py). Every refusal the issue names is
a 401/403 saying why, an audit event and a call of the failure hook."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from hopsearch.service.auth.public_keys import JwksUrl, token_key
from hopsearch.service.auth.records import KeyRecord, TokenKey
from hopsearch.service.auth.tokens import JwtVerifier, looks_like_jwt, token_verifier
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import ApiError, AuthenticationError, AuthorizationError, ConfigError, InputError
from tests.token_fixtures import AUDIENCE, ISSUER, Keys, claims, idp_claims, jwk, pem, sign


@pytest.fixture(scope="module")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Groups:
    def __init__(self, stored: Mapping[str, set[str]]) -> None:
        self.stored = stored

    async def groups_of(self, user: str) -> frozenset[str]:
        return frozenset(self.stored.get(user, ()))


@pytest.fixture(scope="module")
def backend(ed_key: ed25519.Ed25519PrivateKey, rsa_key: rsa.RSAPrivateKey) -> KeyRecord:
    return KeyRecord(
        name="intranet",
        principals=frozenset({"group:staff", "group:hr", "group:eng", "public"}),
        indices=("docs-*",),
        token_keys=(
            TokenKey("ed1", "EdDSA", pem(ed_key.public_key())),
            TokenKey("rsa1", "RS256", pem(rsa_key.public_key())),
        ),
    )


def unsigned(header: Mapping[str, Any], body: Mapping[str, Any], signature: bytes = b"") -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps(header).encode()) + "." + part(json.dumps(body).encode())
    return head + "." + part(signature)


class Failures(list[str]):
    def __call__(self, reason: str) -> None:
        self.append(reason)


def verifier(*records: KeyRecord, groups: Groups | None = None, **overrides: Any) -> tuple[JwtVerifier, Failures]:
    failures = Failures()
    made = token_verifier(Settings(**overrides), Keys(*records), groups, on_failure=failures)
    assert isinstance(made, JwtVerifier)
    return made, failures


async def refused(check: JwtVerifier, token: str, error: type[ApiError] = AuthenticationError) -> ApiError:
    with pytest.raises(error) as caught:
        await check.verify(token)
    assert caught.value.status == (401 if error is AuthenticationError else 403)
    assert caught.value.error_type == "security_exception"
    return caught.value


# --- a back end's tokens ---------------------------------------------------------------------------


async def test_an_eddsa_token_acts_for_its_end_user_within_the_key(
    backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    check, failures = verifier(backend)
    caller = await check.verify(
        sign(ed_key, "EdDSA", "intranet/ed1", claims(principals=["ＧＲＯＵＰ:ＨＲ", "group:staff"]))
    )
    # user:alice is no principal of the key: the token's caller stays within the key's (sub still owns traces)
    assert caller.principals == {"group:hr", "group:staff", "public"}
    assert (caller.subject, caller.key, caller.admin, caller.indices) == ("alice", "intranet", False, ("docs-*",))
    assert not failures


async def test_a_key_cannot_mint_its_way_into_a_users_own_documents(
    backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    """A key limited to some groups that mints ``sub=ceo`` reads what those groups read, never ``user:ceo``'s
    documents; a key that holds ``user:ceo`` (or an admin key) does give it to the token."""
    check, _ = verifier(backend)
    caller = await check.verify(sign(ed_key, "EdDSA", "intranet/ed1", claims(sub="ceo", principals=["group:eng"])))
    assert "user:ceo" not in caller.principals and caller.subject == "ceo"
    holding = replace(backend, principals=backend.principals | {"user:ceo"})
    check, _ = verifier(holding)
    caller = await check.verify(sign(ed_key, "EdDSA", "intranet/ed1", claims(sub="ceo", principals=["group:eng"])))
    assert caller.principals == {"group:eng", "user:ceo", "public"}
    check, _ = verifier(replace(backend, admin=True))
    caller = await check.verify(sign(ed_key, "EdDSA", "intranet/ed1", claims(sub="ceo")))
    assert "user:ceo" in caller.principals and not caller.admin


async def test_an_rs256_token_and_the_kid_of_a_key_with_one_public_key(
    backend: KeyRecord, rsa_key: rsa.RSAPrivateKey, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    check, _ = verifier(backend)
    caller = await check.verify(sign(rsa_key, "RS256", "intranet/rsa1", claims(sub="bob")))
    assert caller.principals == {"group:staff", "public"} and caller.subject == "bob"
    single = replace(backend, name="wiki", token_keys=backend.token_keys[:1])
    check, _ = verifier(single)
    assert (await check.verify(sign(ed_key, "EdDSA", "wiki", claims()))).key == "wiki"
    # the bare key name is no choice between two public keys
    check, _ = verifier(backend)
    error = await refused(check, sign(ed_key, "EdDSA", "intranet", claims()))
    assert "has no public key []" in error.message and "ed1, rsa1" in error.message


async def test_a_forged_signature_is_refused(backend: KeyRecord) -> None:
    check, failures = verifier(backend)
    forger = ed25519.Ed25519PrivateKey.generate()
    error = await refused(check, sign(forger, "EdDSA", "intranet/ed1", claims()))
    assert "signature does not verify with API key [intranet]'s public key [ed1]" in error.message
    assert failures == ["signature"]
    # the signature of another token, pasted onto new claims
    genuine = sign(ed25519.Ed25519PrivateKey.generate(), "EdDSA", "intranet/ed1", claims())
    head = unsigned({"alg": "EdDSA", "kid": "intranet/ed1", "typ": "JWT"}, claims(principals=["group:hr"]))
    await refused(check, head.rsplit(".", 1)[0] + "." + genuine.rsplit(".", 1)[1])


async def test_another_algorithm_is_refused_none_and_hs256_with_the_public_key_too(
    backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey, rsa_key: rsa.RSAPrivateKey
) -> None:
    check, failures = verifier(backend)
    none = unsigned({"alg": "none", "kid": "intranet/ed1"}, claims())
    assert "signed with [none]" in (await refused(check, none)).message
    # the classic confusion: HMAC keyed with the (public) PEM the server holds
    public = backend.token_keys[1].public_pem
    head = unsigned({"alg": "HS256", "kid": "intranet/rsa1"}, claims()).rsplit(".", 1)[0]
    mac = hmac.new(public.encode(), head.encode(), hashlib.sha256).digest()
    forged = head + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert "takes RS256 only" in (await refused(check, forged)).message
    # a genuine signature, but not with the key's pinned algorithm
    assert "takes EdDSA only" in (await refused(check, sign(rsa_key, "RS256", "intranet/ed1", claims()))).message
    assert failures == ["algorithm"] * 3


async def test_exp_is_required_capped_and_checked(backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey) -> None:
    check, failures = verifier(backend, token_max_ttl_s=900)
    no_exp = {k: v for k, v in claims().items() if k != "exp"}
    assert "has no `exp`" in (await refused(check, sign(ed_key, "EdDSA", "intranet/ed1", no_exp))).message
    far = claims(exp=int(time.time()) + 7200)
    error = await refused(check, sign(ed_key, "EdDSA", "intranet/ed1", far))
    assert "token_max_ttl_s allows 900 s" in error.message
    past = claims(exp=int(time.time()) - 120)
    assert "the token expired at" in (await refused(check, sign(ed_key, "EdDSA", "intranet/ed1", past))).message
    skewed = claims(exp=int(time.time()) - 5)  # within token_leeway_s (30 s) of clock skew
    assert (await check.verify(sign(ed_key, "EdDSA", "intranet/ed1", skewed))).subject == "alice"
    assert failures == ["no_exp", "far_exp", "expired"]
    # within the cap, and within the clock skew allowed past it
    assert await check.verify(sign(ed_key, "EdDSA", "intranet/ed1", claims(exp=int(time.time()) + 900)))


async def test_principals_beyond_the_key_are_refused_naming_them(
    backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    check, failures = verifier(backend)
    token = sign(ed_key, "EdDSA", "intranet/ed1", claims(principals=["group:staff", "group:board", "user:ceo"]))
    error = await refused(check, token, AuthorizationError)
    assert "does not have: group:board, user:ceo" in error.message
    assert failures == ["principals_beyond_key"]


async def test_too_many_principals_tell_to_use_groups(backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey) -> None:
    wide = replace(backend, principals=frozenset(f"group:g{n}" for n in range(100)))
    check, failures = verifier(wide, token_max_principals=10)
    token = sign(ed_key, "EdDSA", "intranet/ed1", claims(principals=[f"group:g{n}" for n in range(11)]))
    error = await refused(check, token, AuthorizationError)
    assert "more than token_max_principals (10)" in error.message and "hopsearch groups add" in error.message
    assert failures == ["too_many_principals"]
    assert await check.verify(sign(ed_key, "EdDSA", "intranet/ed1", claims(principals=["group:g1"] * 10)))


async def test_a_revoked_or_expired_key_refuses_its_tokens(
    backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    keys = Keys(backend)
    failures = Failures()
    check = JwtVerifier(keys, Settings(), on_failure=failures)
    token = sign(ed_key, "EdDSA", "intranet/ed1", claims())
    assert (await check.verify(token)).subject == "alice"
    keys.records["intranet"] = replace(backend, revoked=True)
    assert "API key [intranet] is revoked" in (await refused(check, token)).message
    keys.records["intranet"] = replace(backend, expires=datetime.now(UTC) - timedelta(seconds=1))
    assert "API key [intranet] is expired at" in (await refused(check, token)).message
    assert failures == ["revoked_key", "revoked_key"]


async def test_unknown_and_missing_kids_keys_without_public_keys_and_bad_claims(
    backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    bare = replace(backend, name="plain", token_keys=())
    check, failures = verifier(backend, bare)
    assert "names no API key" in (await refused(check, sign(ed_key, "EdDSA", "nobody/ed1", claims()))).message
    assert "names no `kid`" in (await refused(check, sign(ed_key, "EdDSA", None, claims()))).message
    error = await refused(check, sign(ed_key, "EdDSA", "plain", claims()))
    assert "has no registered public key" in error.message and "keys add-public-key plain" in error.message
    assert "has no public key [ed9]" in (await refused(check, sign(ed_key, "EdDSA", "intranet/ed9", claims()))).message
    no_sub = {k: v for k, v in claims().items() if k != "sub"}
    assert "no `sub`" in (await refused(check, sign(ed_key, "EdDSA", "intranet/ed1", no_sub))).message
    text = sign(ed_key, "EdDSA", "intranet/ed1", claims(principals="group:staff"))
    assert "`principals` is not a list of strings" in (await refused(check, text)).message
    assert "not a valid JWT" in (await refused(check, "not.a-jwt")).message
    # what the sender put in the token is not echoed whole (messages go to the client and the audit log)
    long_kid = (await refused(check, sign(ed_key, "EdDSA", "x" * 5000 + "\n", claims()))).message
    assert len(long_kid) < 200 and "\n" not in long_kid
    assert failures == ["unknown_key"] * 4 + ["claims", "claims", "malformed", "unknown_key"]


async def test_an_admin_keys_end_user_is_no_admin(backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey) -> None:
    admin = replace(backend, name="ops", admin=True, principals=frozenset())
    check, _ = verifier(admin)
    caller = await check.verify(sign(ed_key, "EdDSA", "ops/ed1", claims(principals=["group:anything"])))
    assert not caller.admin and "admin" not in caller.actions and not caller.may("admin")
    assert caller.principals == {"group:anything", "user:alice", "public"}


async def test_stored_groups_join_within_the_key(backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey) -> None:
    groups = Groups({"alice": {"group:hr", "group:eng", "group:board"}})
    check, _ = verifier(backend, groups=groups)
    caller = await check.verify(sign(ed_key, "EdDSA", "intranet/ed1", claims(principals=[])))
    # group:board is stored for alice, but the back end's key cannot grant it
    assert caller.principals == {"group:hr", "group:eng", "public"}


async def test_refusals_are_audit_events_without_the_token(
    backend: KeyRecord, ed_key: ed25519.Ed25519PrivateKey, caplog: pytest.LogCaptureFixture
) -> None:
    check, _ = verifier(backend)
    token = sign(ed25519.Ed25519PrivateKey.generate(), "EdDSA", "intranet/ed1", claims())
    with caplog.at_level(logging.WARNING, logger="hopsearch.audit"):
        await refused(check, token)
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "token_refused"]
    assert (getattr(record, "reason", None), getattr(record, "key", None)) == ("signature", "intranet")
    assert token not in caplog.text and token.split(".")[2] not in caplog.text


def test_registered_public_keys_are_checked(rsa_key: rsa.RSAPrivateKey, ed_key: ed25519.Ed25519PrivateKey) -> None:
    good = token_key("ed1", "EdDSA", pem(ed_key.public_key()))
    assert good.algorithm == "EdDSA" and "BEGIN PUBLIC KEY" in good.public_pem
    private = ed_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(InputError, match=r"backend\.pem: is a private key"):
        token_key("ed1", "EdDSA", private, source="backend.pem")
    with pytest.raises(InputError, match="not an Ed25519 key"):
        token_key("k", "EdDSA", pem(rsa_key.public_key()))
    with pytest.raises(InputError, match="RSA key of 1024 bits"):
        token_key("k", "RS256", pem(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()))
    with pytest.raises(InputError, match="not a PEM public key"):
        token_key("k", "RS256", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(InputError, match="EdDSA or RS256"):
        token_key("k", "HS256", pem(rsa_key.public_key()))


# --- the IdP's tokens ------------------------------------------------------------------------------


@pytest.fixture
def jwks_file(tmp_path: Path, rsa_key: rsa.RSAPrivateKey, ed_key: ed25519.Ed25519PrivateKey) -> Path:
    path = tmp_path / "jwks.json"
    keys = [jwk(rsa_key.public_key(), "idp-rsa"), jwk(ed_key.public_key(), "idp-ed", alg="EdDSA")]
    path.write_text(json.dumps({"keys": keys}))
    return path


def idp_verifier(jwks: str, groups: Groups | None = None, **overrides: Any) -> tuple[JwtVerifier, Failures]:
    settings = {"idp_issuer": ISSUER, "idp_audience": [AUDIENCE], "idp_jwks": jwks, **overrides}
    failures = Failures()
    made = token_verifier(Settings(**settings), None, groups, on_failure=failures)
    assert isinstance(made, JwtVerifier)
    return made, failures


async def test_an_idp_token_checked_against_a_jwks_file(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    groups = Groups({"u-123": {"group:finance"}})
    check, failures = idp_verifier(str(jwks_file), groups, idp_indices=["docs-*"], idp_actions=["search"])
    caller = await check.verify(sign(rsa_key, "RS256", "idp-rsa", idp_claims()))
    assert caller.principals == {"user:u-123", "group:hr", "group:eng", "group:finance", "public"}
    assert (caller.subject, caller.admin, caller.key, caller.indices) == ("u-123", False, None, ("docs-*",))
    assert caller.actions == {"search"} and not failures
    named = idp_verifier(str(jwks_file), idp_subject_claim="preferred_username")[0]
    caller = await named.verify(sign(rsa_key, "RS256", "idp-rsa", idp_claims(preferred_username="Alice@Example.com")))
    assert caller.subject == "Alice@Example.com" and "user:alice@example.com" in caller.principals


async def test_idp_refusals(jwks_file: Path, rsa_key: rsa.RSAPrivateKey, ed_key: ed25519.Ed25519PrivateKey) -> None:
    check, failures = idp_verifier(str(jwks_file))
    wrong_aud = sign(rsa_key, "RS256", "idp-rsa", idp_claims(aud="api://other"))
    assert "`aud` names none of ['api://hopsearch']" in (await refused(check, wrong_aud)).message
    wrong_iss = sign(rsa_key, "RS256", "idp-rsa", idp_claims(iss="https://evil.example.com"))
    assert "is not the IdP's" in (await refused(check, wrong_iss)).message
    # EdDSA is a key the JWKS holds, but idp_algorithms allows RS256 only
    assert (
        "idp_algorithms allows ['RS256']"
        in (await refused(check, sign(ed_key, "EdDSA", "idp-ed", idp_claims()))).message
    )
    forged = sign(rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256", "idp-rsa", idp_claims())
    assert "signature does not verify" in (await refused(check, forged)).message
    assert "hold no key [nope]" in (await refused(check, sign(rsa_key, "RS256", "nope", idp_claims()))).message
    far = idp_claims(exp=int(time.time()) + 3 * 86_400)
    assert "idp_max_ttl_s allows 86400 s" in (await refused(check, sign(rsa_key, "RS256", "idp-rsa", far))).message
    no_exp = {k: v for k, v in idp_claims().items() if k != "exp"}
    assert "has no `exp`" in (await refused(check, sign(rsa_key, "RS256", "idp-rsa", no_exp))).message
    many = idp_claims(groups=[f"g{n}" for n in range(65)])
    await refused(check, sign(rsa_key, "RS256", "idp-rsa", many), AuthorizationError)
    assert failures == [
        *("audience", "issuer", "algorithm", "signature", "unknown_key", "far_exp", "no_exp", "too_many_principals")
    ]
    # EdDSA allowed: the JWK's own `alg` still pins it (an RS256 header on the Ed25519 key is refused)
    both, _ = idp_verifier(str(jwks_file), idp_algorithms=["RS256", "EdDSA"])
    assert (await both.verify(sign(ed_key, "EdDSA", "idp-ed", idp_claims()))).subject == "u-123"
    assert (
        "signs with EdDSA, not RS256" in (await refused(both, sign(rsa_key, "RS256", "idp-ed", idp_claims()))).message
    )


class JwksServer:
    """A real HTTP server on loopback serving a JWKS that a test may change; counts the fetches."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.fetches += 1
                body = json.dumps({"keys": outer.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/discovery/keys"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks_server(rsa_key: rsa.RSAPrivateKey) -> Iterator[JwksServer]:
    served = JwksServer([jwk(rsa_key.public_key(), "k1")])
    yield served
    served.close()


async def test_an_idp_token_checked_against_a_jwks_url_with_key_rotation(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    check, failures = idp_verifier(jwks_server.url)
    assert isinstance(check.idp, JwksUrl)
    check.idp.refetch_s = 0.5
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    try:
        for _ in range(3):
            assert (await check.verify(sign(rsa_key, "RS256", "k1", idp_claims()))).subject == "u-123"
        assert jwks_server.fetches == 1  # kept, not fetched per token
        jwks_server.keys = [jwk(rotated.public_key(), "k2"), *jwks_server.keys]
        await refused(check, sign(rotated, "RS256", "k2", idp_claims()))  # fetched a moment ago: not again
        assert jwks_server.fetches == 1 and failures == ["unknown_key"]
        await asyncio.sleep(0.6)
        assert (await check.verify(sign(rotated, "RS256", "k2", idp_claims()))).subject == "u-123"
        assert jwks_server.fetches == 2
    finally:
        await check.aclose()


async def test_an_unreachable_jwks_url_refuses_with_a_reason(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    url = jwks_server.url
    jwks_server.close()
    check, failures = idp_verifier(url)
    try:
        error = await refused(check, sign(rsa_key, "RS256", "k1", idp_claims()))
        assert f"could not be fetched from {url}" in error.message and failures == ["jwks_unavailable"]
    finally:
        await check.aclose()


def test_the_factory(tmp_path: Path) -> None:
    assert token_verifier(Settings(), None, None) is None
    assert isinstance(token_verifier(Settings(), Keys(), None), JwtVerifier)
    with pytest.raises(ConfigError, match="without idp_audience and idp_jwks"):
        token_verifier(Settings(idp_issuer=ISSUER), Keys(), None)
    bad = tmp_path / "bad.json"
    bad.write_text('{"keys": [{"n": 1}]}')
    with pytest.raises(ConfigError, match=r"bad\.json: keys\[0\] is not a JWK"):
        token_verifier(Settings(idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(bad)), None, None)
    with pytest.raises(ConfigError, match=r"missing\.json"):
        token_verifier(
            Settings(idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(tmp_path / "missing.json")), None, None
        )


async def test_an_es256_idp_token(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk(key.public_key(), "ec1"), {"kty": "RSA", "use": "enc", "kid": "x"}]}))
    check, _ = idp_verifier(str(path), idp_algorithms=["ES256"])
    assert (await check.verify(sign(key, "ES256", "ec1", idp_claims(groups=[])))).principals == {"user:u-123", "public"}


def readme_example() -> str:
    """The README's Python example of a back end minting a token."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## End-user tokens and groups") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


async def test_the_readme_example_mints_a_token_the_service_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    code = readme_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 10  # "a ten-line example"
    private = ed_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "backend.pem").write_bytes(private)
    monkeypatch.chdir(tmp_path)
    defined: dict[str, Any] = {}
    exec(code[: code.index("response = httpx.post(")], defined)  # everything but the request itself
    registered = token_key("ed1", "EdDSA", pem(ed_key.public_key()))
    key = KeyRecord("intranet", frozenset({"group:staff", "group:hr"}), token_keys=(registered,))
    check, _ = verifier(key)
    caller = await check.verify(defined["token_for"]("alice", ["staff", "hr"]))
    assert caller.principals == {"group:staff", "group:hr", "public"} and caller.key == "intranet"


def test_a_bearer_value_that_is_a_jwt_is_told_from_a_key_secret(ed_key: ed25519.Ed25519PrivateKey) -> None:
    assert looks_like_jwt(sign(ed_key, "EdDSA", "intranet/ed1", claims()))
    assert looks_like_jwt(unsigned({"alg": "none"}, claims()))  # a JWT still: verify refuses it
    for secret in ("hs_4f1c2b9e8d7a6f5e", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.e30", "e30.e30.sig", "not base64!.e30.x"):
        assert not looks_like_jwt(secret), secret


async def test_a_jwks_url_that_goes_down_keeps_the_keys_fetched_before(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey, caplog: pytest.LogCaptureFixture
) -> None:
    check, failures = idp_verifier(jwks_server.url)
    assert isinstance(check.idp, JwksUrl)
    check.idp.refetch_s = 0.0
    try:
        assert (await check.verify(sign(rsa_key, "RS256", "k1", idp_claims()))).subject == "u-123"
        jwks_server.close()
        with caplog.at_level(logging.WARNING):
            await refused(check, sign(rsa_key, "RS256", "k9", idp_claims()))  # fetches again, and fails
        assert "the keys before stay in use" in caplog.text and failures == ["unknown_key"]
        assert (await check.verify(sign(rsa_key, "RS256", "k1", idp_claims()))).subject == "u-123"
    finally:
        await check.aclose()
