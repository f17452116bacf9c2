"""The pure parts of document permissions: principals of a passage, the access filter under each
``acl_default``, sidecar parsing and glob matching, ranks for non-admins, trace ownership, and the
vector cache (real SQLite files)."""

from __future__ import annotations

import threading
from pathlib import Path, PurePosixPath

import pytest

from hopsearch.loaders.acl import FolderAcls, acl_value, glob_matches, read_sidecar
from hopsearch.loaders.vector_cache import VectorCache, content_hash
from hopsearch.service.access import ADMIN, Caller, Scope, access_clause, document_acl, document_principal
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import InputError
from hopsearch.service.retrieval.readers import by_id_body, shown_hits
from hopsearch.service.traces.reads import owns, recent_body
from hopsearch.service.types import Hit


def test_document_principals_are_normalised_and_bad_ones_say_why() -> None:
    assert document_principal(" ＧＲＯＵＰ:ＨＲ ") == "group:hr"
    assert document_acl(["public", "user:Bob", "user:bob"]) == ["public", "user:bob"]
    for bad, why in [
        ("team:x", "public, private, user:<name> or group:<name>"),
        ("group:", "empty"),
        ("user:a*", "'*'"),
        ("group:a,b", "','"),
        ("user:a\x00", "'\\x00'"),
    ]:
        with pytest.raises(ValueError, match="bad principal") as caught:
            document_principal(bad)
        assert why in str(caught.value)
    with pytest.raises(ValueError, match="no principals"):
        document_acl([])
    with pytest.raises(ValueError, match="cannot be combined"):
        document_acl(["private", "public"])
    assert acl_value("group:hr, public") == ["group:hr", "public"]
    with pytest.raises(ValueError, match="string or a list"):
        acl_value(3)


def test_the_access_filter_under_each_acl_default() -> None:
    alice = Caller.of(["group:hr", "private"], subject="alice")
    assert access_clause(alice) == {"terms": {"acl": ["group:hr", "public"]}}  # private is nobody's
    public = access_clause(alice, "public")
    assert public["bool"]["should"][0] == {"terms": {"acl": ["group:hr", "public"]}}
    assert public["bool"]["should"][1] == {"bool": {"must_not": [{"exists": {"field": "acl"}}]}}
    assert Scope("i", ADMIN).access() == () and Scope("i", alice, acl_default="public").access() == (public,)
    body = by_id_body(["a"], Scope("i", alice), ["title", "acl"])
    assert (
        body["_source"] == ["title"] and {"terms": {"acl": ["group:hr", "public"]}} in body["query"]["bool"]["filter"]
    )


def test_non_admins_get_no_acl_and_ranks_where_set() -> None:
    hits = [Hit("a", 7.5, "A", "x", {"acl": ["group:hr"], "title": "A"}), Hit("b", 3.0, "B", "y", {"title": "B"})]
    alice = Caller.of(["group:hr"], subject="alice")
    assert shown_hits(Scope("i", ADMIN, scores="ranks"), hits) == hits
    shown = shown_hits(Scope("i", alice), hits)
    assert [h.score for h in shown] == [7.5, 3.0] and all("acl" not in h.source for h in shown)
    assert [h.score for h in shown_hits(Scope("i", alice, scores="ranks"), hits)] == [1.0, 0.5]


def test_a_trace_is_its_askers_and_admins() -> None:
    doc = {"user": {"subject": "alice", "key": "backend", "admin": False, "owner": "key:backend/sub:alice"}}
    assert owns(ADMIN, doc) and owns(Caller.of([], subject="alice", owner="key:backend/sub:alice"), doc)
    assert not owns(Caller.of([], subject="alice", owner="key:other/sub:alice"), doc)  # same sub, other key
    assert not owns(Caller.of([], subject="bob"), doc) and not owns(Caller.of([]), doc)
    assert not owns(Caller.of([], subject="alice"), {"question": "made before traces had owners"})
    assert "query" not in recent_body(5, caller=ADMIN)
    assert recent_body(5, caller=Caller.of([], subject="bob", owner="cli/sub:bob"))["query"] == {
        "bool": {"filter": [{"term": {"user.owner": "cli/sub:bob"}}]}
    }
    assert recent_body(5, caller=Caller.of([]))["query"]["bool"]["filter"][0]["bool"]["must_not"]


def test_globs_match_names_without_a_slash_and_paths_with_one() -> None:
    assert glob_matches("*.xlsx", PurePosixPath("a/b/pay.xlsx"))
    assert glob_matches("salaries/**", PurePosixPath("salaries/2024/q1.md"))
    assert glob_matches("salaries/*.md", PurePosixPath("salaries/q1.md"))
    assert not glob_matches("salaries/*.md", PurePosixPath("salaries/2024/q1.md"))
    assert glob_matches("**/board-*.md", PurePosixPath("board-1.md"))


def test_sidecar_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / ".hopsearch-acl.yaml"
    path.write_text('"*": public\n\n"x/**": [group:ok, user:]\n')
    with pytest.raises(InputError) as caught:
        read_sidecar(path)
    assert str(caught.value).startswith(f"{path}:3: rule 'x/**'")
    path.write_text("- just\n- a list\n")
    with pytest.raises(InputError, match=":1: an ACL sidecar maps globs"):
        read_sidecar(path)
    path.write_text('"*": [public\n')
    with pytest.raises(InputError, match="not valid YAML"):
        read_sidecar(path)
    path.write_text("")
    assert FolderAcls(["group:x"]).acl_of(tmp_path / "a.md") == ("group:x",)


def test_the_vector_cache_keeps_float32_vectors_within_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "v.sqlite3"
    with VectorCache(path, max_bytes=10 * 4 * 4) as cache:  # room for ten 4-dim vectors
        keys = [content_hash(f"text {n}") for n in range(15)]
        assert cache.put_many("m1", [(k, [float(n), 0.5, -1.0, 2.0]) for n, k in enumerate(keys)]) == 15
        assert len(cache) == 10 and cache.bytes == 160
        got = cache.get_many("m1", keys)
        assert set(got) == set(keys[5:]) and got[keys[7]] == [7.0, 0.5, -1.0, 2.0]  # the oldest went
        assert cache.get_many("m2", keys) == {}  # another embedder never shares
        cache.put_many("m1", [(keys[7], [9.0, 9.0, 9.0, 9.0])])  # replaced, not counted twice
        assert cache.bytes == 160 and cache.get_many("m1", [keys[7]])[keys[7]] == [9.0] * 4
    # shared by several loads (threads here): every write lands
    with VectorCache(path, max_bytes=1 << 20) as one, VectorCache(path, max_bytes=1 << 20) as two:

        def put(cache: VectorCache, start: int) -> None:
            for n in range(start, start + 50):
                cache.put_many("m3", [(content_hash(str(n)), [1.0, 2.0])])

        threads = [threading.Thread(target=put, args=(c, s)) for c, s in ((one, 0), (two, 50))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(one.get_many("m3", [content_hash(str(n)) for n in range(100)])) == 100
    path.write_bytes(b"not a database at all" * 100)  # damaged: started anew
    with VectorCache(path) as cache:
        assert len(cache) == 0


def test_a_vector_cache_folder_that_cannot_be_written_is_a_load_without_the_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A load run by a user who cannot write the cache folder (another HOME, a read-only mount) goes on
    without the cache, saying so, instead of failing before its first document."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    settings = Settings(cache_dir=blocked / "hopsearch", vector_cache_mb=64)  # type: ignore[call-arg]
    assert VectorCache.for_settings(settings) is None
    assert "runs without it" in caplog.text and "HOPSEARCH_CACHE_DIR" in caplog.text
    opened = VectorCache.for_settings(Settings(cache_dir=tmp_path / "ok", vector_cache_mb=64))  # type: ignore[call-arg]
    assert opened is not None
    opened.close()
