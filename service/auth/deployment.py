"""The deployment's secret: 32 random bytes kept with the keys (``<prefix>-keys``, document
``deployment-secret``), made once and read by every process of the deployment.

It keys what must not be guessable from public facts, such as a document's id, which is an HMAC of its
file's path (:func:`~hopsearch.loaders.docs.doc_id_of`): an unkeyed hash of a path is recoverable offline by
guessing folders. It lives in Elasticsearch, not in ``state_dir``, because every ``serve`` worker and every
``index docs`` run of a deployment share the cluster, not a disk (several hosts load into one index). The
first process to need it creates it with ``op_type=create``; a process that loses that race reads the
winner's (a real-time get), so all agree.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from hopsearch.service.auth.keys import KeyStore
from hopsearch.service.errors import StoreError
from hopsearch.service.store import Store

SECRET_DOC = "deployment-secret"
KIND = "deployment_secret"


async def deployment_secret(store: Store) -> bytes:
    """Return the deployment's secret, created on first use (see the module docstring)."""
    keys = KeyStore.of(store)
    await keys.ensure_index()
    doc = await store.get_document(keys.index, SECRET_DOC)
    if doc is None:
        fresh = {"kind": KIND, "secret": secrets.token_hex(32), "created": datetime.now(UTC).isoformat()}
        await store.create_document(keys.index, SECRET_DOC, fresh)  # False: another process made it first
        doc = await store.get_document(keys.index, SECRET_DOC)
    if doc is None or doc.get("kind") != KIND or not isinstance(doc.get("secret"), str):
        raise StoreError(f"[{keys.index}] holds no readable deployment secret ({SECRET_DOC})")
    return bytes.fromhex(doc["secret"])
