"""What a JWT says, read with PyJWT, and its refusals as messages a person reads.

Each refusal is an :class:`~hopsearch.service.errors.AuthenticationError` (401) or, where the token is
genuine but asks too much, an :class:`~hopsearch.service.errors.AuthorizationError` (403), with
``details["reason"]`` a short code the audit log and the metrics count. Values the sender put in a token
are shown truncated (:func:`shown`).
"""

from __future__ import annotations

import base64
import json
import math
import re
from datetime import UTC, datetime
from typing import Any, NoReturn

import jwt

from hopsearch.service.errors import AuthenticationError, AuthorizationError


def refuse(reason: str, message: str, *, forbidden: bool = False, **context: Any) -> NoReturn:
    error = AuthorizationError if forbidden else AuthenticationError
    raise error(message, details={"reason": reason, **{k: v for k, v in context.items() if v is not None}})


_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")


def looks_like_jwt(value: str) -> bool:
    """Whether a ``Bearer`` value is a JWT (three base64url segments, the first a JSON header naming an
    ``alg``) rather than an API key's secret: the gate's choice between the key store and :meth:`verify`."""
    parts = value.split(".")
    if len(parts) != 3 or not all(_SEGMENT.fullmatch(part) for part in parts[:2]):
        return False
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and "alg" in header


def expiry_of(token: str) -> datetime | None:
    """Return the ``exp`` of a token the verifier has already accepted (read without the signature: the check is
    done), as a time; None where it names none."""
    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return None
    if not isinstance(exp, int | float) or not math.isfinite(exp):
        return None
    try:
        return datetime.fromtimestamp(exp, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def shown(value: Any, limit: int = 80) -> str:
    """Return a value from the token as a message may show it: the token is the sender's, not to be echoed whole."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= limit else text[:limit] + "…"


def when(seconds: Any) -> str:
    try:
        return datetime.fromtimestamp(float(seconds), UTC).isoformat(timespec="seconds")
    except (TypeError, ValueError, OverflowError):
        return repr(seconds)


def public_key(algorithm: str, pem: str) -> Any:
    """Return a registered PEM parsed (the verifier keeps what it parsed: :class:`~.tokens.JwtVerifier`)."""
    try:
        return jwt.get_algorithm_by_name(algorithm).prepare_key(pem)
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        refuse("algorithm", f"the registered public key is no {algorithm} public key: {exc}")


#: The claims that are NumericDates (RFC 7519 §2): a JSON number, never a string of digits.
NUMERIC_DATES = ("exp", "nbf", "iat")


def check_numeric_dates(claims: dict[str, Any]) -> None:
    """Refuse a token whose ``exp``, ``nbf`` or ``iat`` is no finite JSON number (PyJWT reads ``"9999999999"``
    as a number: a string is refused here, before anything reads the time)."""
    for name in NUMERIC_DATES:
        if name not in claims:
            continue
        value = claims[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            refuse("claims", f"the token's `{name}` ({shown(value)!r}) is not a JSON number (RFC 7519 NumericDate)")


def decode(token: str, key: Any, algorithm: str, whose: str, **checks: Any) -> dict[str, Any]:
    """Return the claims of a token whose signature verifies with ``key`` under ``algorithm``, ``exp`` present
    and not past, each NumericDate a JSON number (:func:`check_numeric_dates`); PyJWT's refusals as the
    messages a person reads."""
    options: jwt.types.Options = {"require": ["exp", *checks.pop("require", ())]}
    if "audience" not in checks:
        options["verify_aud"] = False
    try:
        claims: dict[str, Any] = jwt.decode(token, key=key, algorithms=[algorithm], options=options, **checks)
    except jwt.ExpiredSignatureError:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
        refuse("expired", f"the token expired at {when(exp)}")
    except jwt.MissingRequiredClaimError as exc:
        if exc.claim == "exp":
            refuse("no_exp", "the token has no `exp`: an end-user token must expire")
        refuse("claims", f"the token has no `{exc.claim}` claim")
    except jwt.InvalidSignatureError:
        refuse("signature", f"the token's signature does not verify with {whose}")
    except jwt.InvalidIssuerError:
        refuse("issuer", f"the token's `iss` is not {checks.get('issuer')!r}")
    except jwt.InvalidAudienceError:
        refuse("audience", f"the token's `aud` names none of {list(checks.get('audience') or ())} (idp_audience)")
    except jwt.ImmatureSignatureError as exc:
        refuse("not_yet_valid", f"the token is not valid yet ({exc})")
    except (jwt.InvalidAlgorithmError, jwt.InvalidKeyError, jwt.PyJWKError) as exc:
        refuse("algorithm", f"the token cannot be checked with {whose} under {algorithm}: {exc}")
    except jwt.InvalidTokenError as exc:
        refuse("malformed", f"the token is not a valid JWT: {exc}")
    check_numeric_dates(claims)
    return claims
