"""The proxy's remembered name answers are never wider than the truth (issue 40 item 3), on a real 8.19
node over real HTTP: a name a non-admin read a moment ago (it resolved to nothing protected) that an
admin then makes an alias of a managed index, and an alias over an open index that a managed index then
joins, are refused on the very next request — within the 2 s the answers are kept — with the managed
index's marker nowhere in the answer."""

from __future__ import annotations

import uuid

from tests.conftest import EsNode
from tests.test_proxy_managed import MARK, Case, es, observe, world


async def test_a_name_remembered_as_harmless_is_resolved_again_before_it_is_passed(es8_node: EsNode) -> None:
    async with world(es8_node) as w:
        late, joined = f"u{uuid.uuid4().hex[:8]}-late", f"u{uuid.uuid4().hex[:8]}-joined"
        await es(es8_node, "POST", "/_aliases", {"actions": [{"add": {"index": w.unmanaged, "alias": joined}}]})
        before = {
            name: await observe(w, w.user_url, Case(name, "GET", f"/{name}/_search?q=*")) for name in (late, joined)
        }
        assert before[late][0] == 404 and before[joined][0] == 200, {k: v[:2] for k, v in before.items()}
        actions = [
            {"add": {"index": w.managed, "alias": late}},
            {"add": {"index": w.managed, "alias": joined}},
        ]
        await es(es8_node, "POST", "/_aliases", {"actions": actions})
        after = {
            name: await observe(w, w.user_url, Case(name, "GET", f"/{name}/_search?q=*")) for name in (late, joined)
        }
    problems = [f"{name}: {status} {body[:200]!r}" for name, (status, body, _) in after.items() if status != 403]
    problems += [
        f"{name}: the managed marker came back" for name, (_, body, _) in after.items() if MARK.encode() in body
    ]
    assert problems == [], "\n".join(problems)
