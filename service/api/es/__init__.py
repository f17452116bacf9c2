"""The Elasticsearch-dialect wing: ``_retrieve``, ``_ask``, traces, outlines, health, metrics, keys and the
trace viewer's pages (:mod:`.ui`), with Elasticsearch's envelopes and error shape."""
