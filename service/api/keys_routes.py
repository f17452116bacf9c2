"""``/_keys``: the stored API keys, for admins (the gate refuses anyone else). ``GET`` lists them (never a
secret: none is stored), ``POST`` creates one and answers its secret once (``key``), ``DELETE
/_keys/{name}`` revokes one. The same as ``hopsearch keys``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from hopsearch.service.api.models import KeyCreatedResponse, KeyCreateRequest, KeyListResponse, KeyRevokedResponse
from hopsearch.service.api.responses import OrjsonResponse
from hopsearch.service.api.routes import state_of
from hopsearch.service.auth.keys import NewKey, listed

router = APIRouter()


@router.get("/_keys", response_model=None, responses={200: {"model": KeyListResponse}})
async def list_keys(request: Request) -> OrjsonResponse:
    """Every stored key (revoked and expired ones with their state), never a secret."""
    state = state_of(request)
    keys = await (await state.key_store()).keys()
    return OrjsonResponse({"keys": [listed(record) for record in keys]})


@router.post("/_keys", response_model=None, status_code=201, responses={201: {"model": KeyCreatedResponse}})
async def create_key(request: Request, body: KeyCreateRequest) -> OrjsonResponse:
    """A new key; its secret is in ``key``, shown this once."""
    state = state_of(request)
    new = NewKey(
        name=body.name,
        principals=body.principals,
        indices=body.indices,
        actions=body.actions,
        admin=body.admin,
        expires=body.expires,
        concurrent_asks=body.concurrent_asks,
        per_minute=body.per_minute,
        token_algorithm=body.token_alg,
        token_public_pem=body.token_public_key,
        namespace=body.namespace,
    )
    secret, record = await (await state.key_store()).create(new)
    state.metrics.audit("key_created")
    return OrjsonResponse({**listed(record), "key": secret}, status_code=201)


@router.delete("/_keys/{name}", response_model=None, responses={200: {"model": KeyRevokedResponse}})
async def revoke_key(request: Request, name: Annotated[str, Path(min_length=1, max_length=128)]) -> OrjsonResponse:
    """Revokes a key: every service process refuses it within a second."""
    state = state_of(request)
    record = await (await state.key_store()).revoke(name)
    state.metrics.audit("key_revoked")
    return OrjsonResponse({"acknowledged": True, **listed(record)})
