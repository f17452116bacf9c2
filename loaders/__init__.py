"""hopsearch.loaders: parse, chunk and embed sources, then bulk them into Elasticsearch.

The entry points are in :mod:`hopsearch.loaders.api` (``load_dpr``, ``load_jsonl``,
``load_qa_contexts``, ``load_docs``) with :class:`~hopsearch.loaders.model.LoadOptions` and
:class:`~hopsearch.loaders.model.LoadReport` in :mod:`hopsearch.loaders.model`.
"""
