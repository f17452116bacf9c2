"""Write ``hopsearch.ndjson``: Kibana 7.17 saved objects (they import into 8.x too) over the hopsearch
traces and outlines indices: two index patterns (data views), a saved search of traces, visualizations
and a dashboard. Run it after changing this file; ``tests/test_docker_files.py`` checks the output
against the mappings in ``es_mappings/``::

    python docker/kibana/build_saved_objects.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRACES = "hopsearch-traces"
OUTLINES = "hopsearch-outlines"
VERSION = "7.17.0"
INDEX_REF = "kibanaSavedObjectMeta.searchSourceJSON.index"
SEARCH_SOURCE = json.dumps({"query": {"query": "", "language": "kuery"}, "filter": [], "indexRefName": INDEX_REF})


def index_pattern(object_id: str, title: str, time_field: str) -> dict[str, Any]:
    return {
        "id": object_id,
        "type": "index-pattern",
        "attributes": {"title": title, "timeFieldName": time_field},
        "references": [],
        "migrationVersion": {"index-pattern": "7.11.0"},
        "coreMigrationVersion": VERSION,
    }


def agg(number: int, kind: str, schema: str, **params: Any) -> dict[str, Any]:
    return {"id": str(number), "enabled": True, "type": kind, "schema": schema, "params": params}


def over_time(number: int) -> dict[str, Any]:
    return agg(number, "date_histogram", "segment", field="started_at", interval="auto", min_doc_count=1)


def visualization(
    object_id: str, title: str, kind: str, aggs: list[dict[str, Any]], pattern: str = TRACES, **params: Any
) -> dict[str, Any]:
    state = {"title": title, "type": kind, "aggs": aggs, "params": {"addTooltip": True, "addLegend": True, **params}}
    return {
        "id": object_id,
        "type": "visualization",
        "attributes": {
            "title": title,
            "description": "",
            "version": 1,
            "uiStateJSON": "{}",
            "visState": json.dumps(state),
            "kibanaSavedObjectMeta": {"searchSourceJSON": SEARCH_SOURCE},
        },
        "references": [{"name": INDEX_REF, "type": "index-pattern", "id": pattern}],
        "migrationVersion": {"visualization": "7.17.0"},
        "coreMigrationVersion": VERSION,
    }


def objects() -> list[dict[str, Any]]:
    traces_search = {
        "id": "hopsearch-traces-search",
        "type": "search",
        "attributes": {
            "title": "hopsearch traces",
            "description": "One row per answered question, newest first.",
            "columns": [
                "question",
                "strategy",
                "status",
                "answer",
                "totals.retrievals",
                "totals.llm_calls",
                "totals.tokens_in",
                "totals.tokens_out",
                "totals.wall_ms",
            ],
            "sort": [["started_at", "desc"]],
            "kibanaSavedObjectMeta": {"searchSourceJSON": SEARCH_SOURCE},
        },
        "references": [{"name": INDEX_REF, "type": "index-pattern", "id": TRACES}],
        "migrationVersion": {"search": "7.9.3"},
        "coreMigrationVersion": VERSION,
    }
    visualizations = [
        visualization(
            "hopsearch-decisions",
            "Retrieve vs parametric decisions",
            "pie",
            [
                agg(1, "count", "metric"),
                agg(2, "terms", "segment", field="steps.decision", size=5, order="desc", orderBy="1"),
            ],
            isDonut=True,
        ),
        visualization(
            "hopsearch-decided-by",
            "How decisions were made (stop_reason, fallbacks, modes)",
            "table",
            [
                agg(1, "count", "metric"),
                agg(2, "terms", "bucket", field="steps.decided_by", size=20, order="desc", orderBy="1"),
            ],
            perPage=10,
        ),
        visualization(
            "hopsearch-retrievals-per-question",
            "Retrievals and LLM calls per question",
            "line",
            [
                agg(1, "avg", "metric", field="totals.retrievals"),
                agg(2, "avg", "metric", field="totals.llm_calls"),
                over_time(3),
            ],
        ),
        visualization(
            "hopsearch-retrievals-histogram",
            "Questions by number of retrievals",
            "histogram",
            [
                agg(1, "count", "metric"),
                agg(2, "histogram", "segment", field="totals.retrievals", interval=1, min_doc_count=False),
            ],
        ),
        visualization(
            "hopsearch-latency",
            "Wall time per question (ms, percentiles)",
            "line",
            [agg(1, "percentiles", "metric", field="totals.wall_ms", percents=[50, 95, 99]), over_time(2)],
        ),
        visualization(
            "hopsearch-step-latency",
            "Step latency by kind (ms, average)",
            "histogram",
            [
                agg(1, "avg", "metric", field="steps.latency_ms"),
                agg(2, "terms", "segment", field="steps.kind", size=10, order="desc", orderBy="1"),
            ],
        ),
        visualization(
            "hopsearch-tokens",
            "LLM tokens in and out",
            "area",
            [
                agg(1, "sum", "metric", field="totals.tokens_in"),
                agg(2, "sum", "metric", field="totals.tokens_out"),
                over_time(3),
            ],
        ),
        visualization(
            "hopsearch-strategies",
            "Questions by strategy and status",
            "histogram",
            [
                agg(1, "count", "metric"),
                agg(2, "terms", "segment", field="strategy", size=10, order="desc", orderBy="1"),
                agg(3, "terms", "group", field="status", size=5, order="desc", orderBy="1"),
            ],
        ),
        visualization(
            "hopsearch-outline-entities",
            "Outline entities by namespace",
            "table",
            [
                agg(1, "count", "metric"),
                agg(2, "terms", "bucket", field="namespace", size=20, order="desc", orderBy="1"),
                agg(3, "cardinality", "metric", field="facts.passage_ids"),
            ],
            pattern=OUTLINES,
            perPage=10,
        ),
    ]
    panels: list[dict[str, Any]] = []
    references: list[dict[str, str]] = []
    for number, item in enumerate([*visualizations, traces_search]):
        x, y = (number % 2) * 24, (number // 2) * 15
        width = 48 if item["type"] == "search" else 24
        panels.append(
            {
                "version": VERSION,
                "type": item["type"],
                "gridData": {"x": x, "y": y, "w": width, "h": 15, "i": str(number + 1)},
                "panelIndex": str(number + 1),
                "embeddableConfig": {},
                "panelRefName": f"panel_{number}",
            }
        )
        references.append({"name": f"panel_{number}", "type": item["type"], "id": item["id"]})
    dashboard = {
        "id": "hopsearch-dashboard",
        "type": "dashboard",
        "attributes": {
            "title": "hopsearch",
            "description": "Decisions (retrieve / parametric), retrievals per question, latency and tokens.",
            "panelsJSON": json.dumps(panels),
            "optionsJSON": json.dumps({"useMargins": True, "hidePanelTitles": False}),
            "timeRestore": True,
            "timeFrom": "now-7d",
            "timeTo": "now",
            "refreshInterval": {"pause": False, "value": 30000},
            "version": 1,
            "kibanaSavedObjectMeta": {
                "searchSourceJSON": json.dumps({"query": {"query": "", "language": "kuery"}, "filter": []})
            },
        },
        "references": references,
        "migrationVersion": {"dashboard": "7.17.0"},
        "coreMigrationVersion": VERSION,
    }
    return [
        index_pattern(TRACES, "hopsearch*-traces", "started_at"),
        index_pattern(OUTLINES, "hopsearch*-outlines", "updated_at"),
        traces_search,
        *visualizations,
        dashboard,
    ]


def render() -> str:
    return "".join(json.dumps(item, sort_keys=True) + "\n" for item in objects())


if __name__ == "__main__":
    Path(__file__).with_name("hopsearch.ndjson").write_text(render(), encoding="utf-8")
