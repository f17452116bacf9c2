"""Which vector index a passages index gets (``HOPSEARCH_VECTOR_INDEX``) and how its kNN searches read it.

Pure functions of the setting, the server's version and the embedder's dimensions:

- :func:`choose_vector_index`: the ``index_options.type`` of a new index's ``embedding`` (``None`` on a
  server without a kNN index: 7.17 keeps its vectors in ``_source`` as before). ``auto`` is the best the
  version offers on a Basic licence: ``bbq_hnsw`` for 384+ dimensions where kNN searches can rescore it with
  the float vectors (``rescore_vector``, 8.18+), else ``int8_hnsw`` (8.12+), else ``hnsw``. An explicit value
  the version (or the dimensions) cannot take is a :class:`~hopsearch.service.errors.ConfigError` naming both.
- :func:`knn_options`: ``num_candidates`` and the oversampling of one index's kNN searches.
- :func:`vector_bytes`: the memory Elasticsearch needs per vector for the searches (the formula of its
  docs: float ``4d``, int8 ``d+4``, int4 ``d/2+4``, bbq ``d/8+14``; the graph comes on top).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from hopsearch.service.config.settings import VectorIndex
from hopsearch.service.errors import ConfigError
from hopsearch.service.store.esclient import ServerInfo

#: The ``index_options.type`` values hopsearch offers (``auto`` resolves to one of them).
KINDS: tuple[str, ...] = tuple(k for k in get_args(VectorIndex) if k != "auto")
#: The first Elasticsearch version that takes each type.
SINCE: dict[str, tuple[int, int]] = {
    "hnsw": (8, 4),
    "int8_hnsw": (8, 12),
    "flat": (8, 13),
    "int8_flat": (8, 13),
    "int4_hnsw": (8, 15),
    "bbq_hnsw": (8, 16),
}
#: Since when a kNN search can rescore quantized candidates with the float vectors (``rescore_vector``).
RESCORE_SINCE = (8, 18)
#: The types whose kNN searches are oversampled and rescored (``knn_oversample``): the coarse quantizations.
RESCORED = frozenset({"bbq_hnsw", "int4_hnsw"})
#: ``auto`` picks bbq from this many dimensions on (Elasticsearch's own default for bbq from 9.1).
BBQ_MIN_AUTO_DIMS = 384
#: Elasticsearch's limit on ``num_candidates``.
MAX_CANDIDATES = 10_000


def _version(info: ServerInfo) -> str:
    return f"Elasticsearch {info.number}"


def choose_vector_index(asked: str, info: ServerInfo, dims: int, oversample: float = 3.0) -> str | None:
    """Return the ``index_options.type`` of a new passages index's vectors (``None``: no kNN index here)."""
    if asked != "auto" and asked not in KINDS:
        raise ConfigError(f"HOPSEARCH_VECTOR_INDEX={asked!r}: not one of auto, {', '.join(KINDS)}")
    if not info.knn:
        if asked == "auto":
            return None
        raise ConfigError(
            f"HOPSEARCH_VECTOR_INDEX={asked}: {_version(info)} has no vector index (kNN needs 8.4+; vectors are "
            "kept in _source and scored exactly); use auto",
            details={"vector_index": asked, "version": info.number},
        )
    if asked == "auto":
        if dims >= BBQ_MIN_AUTO_DIMS and oversample > 0 and info.version >= RESCORE_SINCE:
            return "bbq_hnsw"
        return "int8_hnsw" if info.version >= SINCE["int8_hnsw"] else "hnsw"
    if info.version < SINCE[asked]:
        since = ".".join(map(str, SINCE[asked]))
        raise ConfigError(
            f"HOPSEARCH_VECTOR_INDEX={asked}: {_version(info)} does not offer it ({asked} needs {since}+)",
            details={"vector_index": asked, "version": info.number},
        )
    if asked == "int4_hnsw" and dims % 2:
        raise ConfigError(f"HOPSEARCH_VECTOR_INDEX=int4_hnsw needs an even number of dimensions, not {dims}")
    if asked == "bbq_hnsw" and dims < 64:
        raise ConfigError(f"HOPSEARCH_VECTOR_INDEX=bbq_hnsw needs at least 64 dimensions, not {dims}")
    return asked


@dataclass(frozen=True, slots=True)
class KnnOptions:
    """How the kNN searches of one index run: at least ``num_candidates`` candidates (and 10 per hit asked),
    and ``oversample`` × k of them rescored with the float vectors (0: not rescored)."""

    num_candidates: int = 100
    oversample: float = 0.0

    def candidates(self, size: int) -> int:
        return min(MAX_CANDIDATES, max(self.num_candidates, size * 10, size))


def knn_options(vector_index: object, info: ServerInfo, num_candidates: int, oversample: float) -> KnnOptions:
    """Return the kNN options of an index whose ``_meta`` records ``vector_index`` (older indices record none:
    never rescored)."""
    rescored = vector_index in RESCORED and oversample > 0 and info.version >= RESCORE_SINCE
    return KnnOptions(num_candidates, oversample if rescored else 0.0)


def vector_bytes(kind: str | None, dims: int) -> float:
    """Bytes per vector the kNN searches need in memory (without the graph), by Elasticsearch's formula."""
    if kind in ("int8_hnsw", "int8_flat"):
        return dims + 4
    if kind == "int4_hnsw":
        return dims / 2 + 4
    if kind == "bbq_hnsw":
        return dims / 8 + 14
    return 4.0 * dims
