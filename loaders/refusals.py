"""Which refusals of a load are about the cluster, not the document, and what an operator does about a block.

A document that Elasticsearch refuses for what it is (a mapping conflict, a bad value) is a dead letter.
A refusal that is about the cluster or the index — a block (``cluster_block_exception``: the flood-stage
disk watermark's ``read_only_allow_delete``, ``index.blocks.write`` …), a closed index, a shard without
a copy, 429s left after every retry, credentials that may not write — would refuse every document
alike: dead-lettering them, as the loader once did, loses them quietly (``--resume`` goes on past
them). Those stop the load instead, with the checkpoint before the first refused row, and an error that
says what to do; ``--resume`` then sends the refused rows again (their ids are deterministic: no
duplicates).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hopsearch.loaders.target import LoadSettings
from hopsearch.service.errors import StoreError

#: Item error types about the cluster or the index, whatever their status.
CLUSTER_SIDE = frozenset(
    {
        "cluster_block_exception",
        "index_closed_exception",
        "unavailable_shards_exception",
        "no_shard_available_action_exception",
        "es_rejected_execution_exception",
        "circuit_breaking_exception",
        "security_exception",
        "index_not_found_exception",
    }
)

#: Block id in a ``blocked by: [STATUS/id/description]`` reason → the setting that sets it.
_BLOCK_SETTINGS = {
    "4": None,  # the index is closed
    "5": "index.blocks.read_only",
    "6": "cluster.blocks.read_only",
    "7": "index.blocks.read",
    "8": "index.blocks.write",
    "9": "index.blocks.metadata",
    "12": "index.blocks.read_only_allow_delete",
    "13": "cluster.blocks.read_only_allow_delete",
}
_BLOCK = re.compile(r"\b[A-Z_]+/(\d+)/([^\];]+)")
_BLOCKED_INDEX = re.compile(r"index \[([^\]]+)\] blocked by")
_FLOOD = (
    "Elasticsearch sets it on every index with a shard on a node whose disk passed the flood-stage disk "
    "watermark (cluster.routing.allocation.disk.watermark.flood_stage, 95% by default): free disk space "
    "there (7.4 and later lift it by themselves once the disk is below the high watermark) or lift it"
)
_BY_HAND = (
    "it is set by hand or by a tool, not by a disk watermark (the flood-stage disk watermark sets "
    "index.blocks.read_only_allow_delete instead): lift it"
)


def error_type(info: Mapping[str, Any]) -> str | None:
    error = info.get("error")
    return str(error.get("type")) if isinstance(error, dict) else None


def error_text(info: Mapping[str, Any]) -> str:
    error = info.get("error")
    return f"{error.get('type')}: {error.get('reason')}" if isinstance(error, dict) else str(error)


def is_block(info: Mapping[str, Any]) -> bool:
    """Tell whether a block refused this item (429 under the flood stage's block, 403 under a write block): retrying
    it is no use until someone lifts the block."""
    return error_type(info) == "cluster_block_exception"


def cluster_side(info: Mapping[str, Any]) -> bool:
    """Whether an item's refusal is about the cluster or the index rather than the document (checked
    after the 429 retries: a 429 left then is the cluster's load, not the document)."""
    status = int(info.get("status", 0))
    return status >= 500 or status in (401, 403, 429) or error_type(info) in CLUSTER_SIDE


def block_advice(text: str, index: str) -> str | None:
    """Return what a block named in ``text`` (an Elasticsearch reason) is and how to lift it; ``None`` when the
    text names none."""
    if "index_closed_exception" in text:
        return f"index [{index}] is closed: open it (POST /{index}/_open)"
    if "cluster_block_exception" not in text and "blocked by" not in text:
        return None
    named = _BLOCKED_INDEX.search(text)
    index = named.group(1) if named else index
    found = _BLOCK.search(text)
    block_id, what = (found.group(1), found.group(2).strip()) if found else ("", "a block")
    setting = _BLOCK_SETTINGS.get(block_id)
    if block_id == "4":
        return block_advice("index_closed_exception", index)
    if setting is None:
        return f"index [{index}] is blocked ({what}); the flood-stage disk watermark is a common cause: lift the block"
    if setting.startswith("cluster."):
        lift = f'PUT /_cluster/settings {{"persistent": {{"{setting}": null}}}}'
        return f"the cluster is blocked by {setting} ({what}): {_BY_HAND} with {lift}"
    why = _FLOOD if block_id == "12" else _BY_HAND
    return f'index [{index}] is blocked by {setting} ({what}): {why} with PUT /{index}/_settings {{"{setting}": null}}'


def stopped(
    exc: StoreError,
    index: str,
    position: int | None,
    checkpoint: Path,
    held: LoadSettings | None,
    *,
    resumable: bool = True,
) -> StoreError:
    """Return the error of a load that Elasticsearch stopped: what happened (a block named, with how to lift
    it), where the load stopped and how to go on (``position``: the checkpoint's, ``None`` before there
    was one; a load that is not ``resumable`` is run again), and whether the index kept its load-time
    settings."""
    message = str(exc)
    advice = exc.details.get("advice") or block_advice(message, index)
    if advice is not None and "advice" not in exc.details:
        message = f"{advice}; {message}"
    again = "--resume" if resumable else "the same command (it goes on where the index stands)"
    if position is None:
        message += "; nothing was loaded: run the load again"
    elif resumable:
        message += f"; load stopped after position {position}, checkpoint {checkpoint}: rerun with --resume"
    else:
        message += f"; load stopped after position {position}: run it again"
    if held is not None and held.unrestored is not None:
        cause = held.unrestored.split(";")[0]
        message += (
            f"; the index's settings for the load (refresh_interval -1, fewer replicas) could not be restored "
            f"({cause}): {again} restores them" + (" once the block is lifted" if advice else "")
        )
    return type(exc)(message, details={**exc.details, "checkpoint": str(checkpoint)})
