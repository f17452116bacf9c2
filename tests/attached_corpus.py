"""Indices users already have, made as their own back ends make them: by plain ``elasticsearch-py`` bulk
calls (never by hopsearch), in two layouts, and a snapshot of everything a write would change.

- :func:`make_connector_index`: Elastic's connectors' layout (``title``, ``body``, ``url``, ``id``,
  ``_allow_access_control`` with the connectors' identities), each restricted document carrying a marker;
- :func:`make_other_index`: other field names (``headline``, ``content``, ``ref``, ``link``), a
  ``dense_vector`` of 16 dimensions (numbers in ``_source`` on the 7.17 zip, which has no vectors), a
  metadata object with an object inside it, and no ACL field (private: admins only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hopsearch.service.access import ADMIN, Caller

#: document id → (marker, ``_allow_access_control`` or None: no such field)
CONNECTOR_DOCS: dict[str, tuple[str, list[str] | None]] = {
    "sp-salary": ("SP-SALARY-MARKER-4", ["group:HR-Team", "email:Carol@Corp.com"]),
    "sp-handbook": ("SP-HANDBOOK-MARKER-2", ["group:everyone"]),
    "sp-alice": ("SP-ALICE-MARKER-8", ["email:alice@corp.com"]),
    "sp-bare": ("SP-BARE-MARKER-6", ["staff-42"]),
    "sp-noacl": ("SP-NOACL-MARKER-1", None),
    "sp-empty": ("SP-EMPTY-MARKER-7", []),
    "sp-long": ("SP-LONG-MARKER-3", ["group:everyone"]),
}
#: a whole document, as connectors index them: its hits carry excerpts, not all of it
LONG_FILLER = " ".join(f"Paragraph {n} of the annual report covers the weather at the coast." for n in range(400))
CONNECTOR_MARKERS = {marker for marker, _ in CONNECTOR_DOCS.values()}
#: the words every marked document shares (and the permissions corpus's scripted models search for)
QUERY = "salary handbook minutes"
CALLERS: dict[str, Caller] = {
    "admin": ADMIN,
    "carol": Caller.of(
        ["user:carol@corp.com", "group:hr-team", "public"],
        subject="carol",
        key="backend",
        owner="key:backend/sub:carol",
    ),
    "staff": Caller.of(
        ["user:alice@corp.com", "group:everyone", "group:staff-42", "public"],
        subject="alice",
        key="backend",
        owner="key:backend/sub:alice",
    ),
    "public": Caller.of(["public"], subject="bob", key="backend", owner="key:backend/sub:bob"),
}
READABLE: dict[str, set[str]] = {
    "admin": set(CONNECTOR_MARKERS),
    "carol": {"SP-SALARY-MARKER-4"},
    "staff": {"SP-HANDBOOK-MARKER-2", "SP-ALICE-MARKER-8", "SP-BARE-MARKER-6", "SP-LONG-MARKER-3"},
    "public": set(),
}
#: the connector documents each caller reads, by id (an id shows in a hit, a citation or a url)
READABLE_IDS: dict[str, set[str]] = {
    "admin": set(CONNECTOR_DOCS),
    "carol": {"sp-salary"},
    "staff": {"sp-handbook", "sp-alice", "sp-bare", "sp-long"},
    "public": set(),
}
OTHER_DOCS = [
    ("w-lethal", "Lethal Weapon", "Lethal Weapon is a 1987 action film directed by Richard Donner.", "film"),
    ("w-donner", "Richard Donner", "Richard Donner (1930-2021) was an American film director.", "people"),
    ("w-jaws", "Jaws (film)", "Jaws is a 1975 American thriller film directed by Steven Spielberg.", "film"),
    ("w-spielberg", "Steven Spielberg", "Steven Allan Spielberg (born December 18, 1946) is a filmmaker.", "people"),
]
DIMS = 16


def plain_client(url: str, major: int) -> Any:
    """A plain synchronous elasticsearch-py client of the server's major version (not hopsearch's)."""
    if major >= 8:
        from elasticsearch import Elasticsearch

        return Elasticsearch(url)
    from elasticsearch7 import Elasticsearch as Elasticsearch7

    return Elasticsearch7(url)


def _bulk(client: Any, major: int, actions: list[dict[str, Any]]) -> None:
    if major >= 8:
        from elasticsearch import helpers
    else:
        from elasticsearch7 import helpers  # type: ignore[no-redef]
    ok, errors = helpers.bulk(client, actions, refresh=True)
    assert (ok, errors) == (len(actions), []), errors


def make_connector_index(client: Any, major: int, name: str) -> None:
    """The connectors' layout (as a SharePoint Online connector's index holds it)."""
    mappings = {
        "properties": {
            "id": {"type": "keyword"},
            "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
            "body": {"type": "text"},
            "url": {"type": "keyword"},
            "_timestamp": {"type": "date"},
            "_allow_access_control": {"type": "keyword"},
        }
    }
    client.indices.create(index=name, body={"settings": {"number_of_shards": 1}, "mappings": mappings})
    actions: list[dict[str, Any]] = []
    for doc_id, (marker, acl) in CONNECTOR_DOCS.items():
        source: dict[str, Any] = {
            "id": doc_id,
            "title": f"Company record {doc_id}",
            "body": f"The salary handbook minutes say: {marker}. This record is {doc_id.replace('-', ' ')}.",
            "url": f"https://corp.sharepoint.com/sites/hr/{doc_id}.docx",
            "_timestamp": "2025-01-02T03:04:05Z",
        }
        if acl is not None:
            source["_allow_access_control"] = acl
        if doc_id == "sp-long":
            source["body"] = f"{LONG_FILLER} {source['body']} {LONG_FILLER}"
        actions.append({"_index": name, "_id": doc_id, "_source": source})
    for n, text in enumerate(["Rivers flow into the sea.", "Mountains are tall."]):
        source = {"id": f"f{n}", "title": "Nature", "body": text, "_allow_access_control": ["group:everyone"]}
        actions.append({"_index": name, "_id": f"filler-{n}", "_source": source})
    _bulk(client, major, actions)


def make_other_index(client: Any, major: int, name: str, vector_of: Callable[[str], list[float]]) -> None:
    """Other names, a 16-d vector of each document's ``content`` (``vector_of``), a nested metadata object."""
    vector: dict[str, Any] = (
        {"type": "dense_vector", "dims": DIMS, "index": True, "similarity": "cosine"}
        if major >= 8
        else {"type": "float", "index": False, "doc_values": False}
    )
    mappings = {
        "properties": {
            "ref": {"type": "keyword"},
            "headline": {"type": "text"},
            "content": {"type": "text"},
            "link": {"type": "keyword"},
            "vec": vector,
            "metadata": {
                "properties": {
                    "team": {"type": "keyword"},
                    "author": {"properties": {"name": {"type": "keyword"}, "email": {"type": "keyword"}}},
                }
            },
        }
    }
    client.indices.create(index=name, body={"settings": {"number_of_shards": 1}, "mappings": mappings})
    actions = [
        {
            "_index": name,
            "_id": doc_id,
            "_source": {
                "ref": f"REF-{doc_id}",
                "headline": title,
                "content": text,
                "link": f"https://wiki.example/{doc_id}",
                "vec": vector_of(text),
                "metadata": {"team": team, "author": {"name": "Editor", "email": "editor@example.org"}},
            },
        }
        for doc_id, title, text, team in OTHER_DOCS
    ]
    _bulk(client, major, actions)


def snapshot(client: Any, major: int, name: str) -> dict[str, Any]:
    """What any write to ``name`` would change: its documents (count, every ``_seq_no`` and primary
    term, every ``_source``), its mapping, its settings and its indexing counters."""
    client.indices.refresh(index=name)
    body: dict[str, Any] = {"size": 1000, "seq_no_primary_term": True, "query": {"match_all": {}}}
    if major >= 9:
        body["_source"] = {"exclude_vectors": False}
    hits = client.search(index=name, body=body)["hits"]["hits"]
    stats = client.indices.stats(index=name, metric="indexing")["indices"][name]["primaries"]["indexing"]
    settings = dict(client.indices.get_settings(index=name))
    return {
        "count": client.count(index=name)["count"],
        "docs": {h["_id"]: (h["_seq_no"], h["_primary_term"], json.dumps(h["_source"], sort_keys=True)) for h in hits},
        "mapping": json.loads(json.dumps(dict(client.indices.get_mapping(index=name)))),
        "settings": json.loads(json.dumps(settings)),
        "indexing": (stats["index_total"], stats["delete_total"]),
    }


@contextmanager
def user_indices(url: str, major: int, prefix: str, vector_of: Callable[[str], list[float]]) -> Iterator[Any]:
    """The two indices (names under ``prefix``, never hopsearch's), deleted afterwards; yields the client."""
    client = plain_client(url, major)
    try:
        make_connector_index(client, major, f"{prefix}-sharepoint")
        make_other_index(client, major, f"{prefix}-wiki", vector_of)
        yield client
    finally:
        for suffix in ("sharepoint", "wiki"):
            if client.indices.exists(index=f"{prefix}-{suffix}"):
                client.indices.delete(index=f"{prefix}-{suffix}")
        client.close()


def found(text: str) -> set[str]:
    """The connector markers in a serialised response."""
    return {marker for marker in CONNECTOR_MARKERS if marker in text}


def ids_in(text: str) -> set[str]:
    """The connector documents a serialised response names by id."""
    return {doc_id for doc_id in CONNECTOR_DOCS if doc_id in text}
