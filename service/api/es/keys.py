"""``/_keys``: the stored API keys, for admins (the gate refuses anyone else). ``GET`` lists them (never a
secret: none is stored), ``POST`` creates one and answers its secret once (``key``), ``DELETE
/_keys/{name}`` revokes one; ``POST /_keys/{name}/public_keys`` registers one more public key of its
end-user tokens and ``DELETE /_keys/{name}/public_keys/{id}`` removes one. The same as ``hopsearch keys``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from hopsearch.service.api.models import (
    KeyCreatedResponse,
    KeyCreateRequest,
    KeyListResponse,
    KeyResponse,
    KeyRevokedResponse,
    PublicKeyAddRequest,
)
from hopsearch.service.api.responses import OrjsonResponse
from hopsearch.service.api.state import state_of
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
    """Return a new key; its secret is in ``key``, shown this once."""
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
        token_key_id=body.token_key_id,
        namespace=body.namespace,
        user_header=body.user_header,
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


KeyName = Annotated[str, Path(min_length=1, max_length=128)]


@router.post("/_keys/{name}/public_keys", response_model=None, responses={200: {"model": KeyResponse}})
async def add_public_key(request: Request, name: KeyName, body: PublicKeyAddRequest) -> OrjsonResponse:
    """Register one more public key with the key: its tokens and those of the key's other public keys are
    all accepted, each naming its own ``kid`` (a rotation's overlap)."""
    state = state_of(request)
    store = await state.key_store()
    record = await store.add_token_key(name, body.token_key_id, body.token_alg, body.token_public_key)
    state.metrics.audit("token_key_added")
    return OrjsonResponse(listed(record))


@router.delete("/_keys/{name}/public_keys/{key_id}", response_model=None, responses={200: {"model": KeyResponse}})
async def remove_public_key(
    request: Request, name: KeyName, key_id: Annotated[str, Path(min_length=1, max_length=128)]
) -> OrjsonResponse:
    """Remove a public key from the key: tokens naming it are refused from then on."""
    state = state_of(request)
    record = await (await state.key_store()).remove_token_key(name, key_id)
    state.metrics.audit("token_key_removed")
    return OrjsonResponse(listed(record))
