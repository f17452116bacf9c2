"""DualRAG's memory that outlives a question: per-entity knowledge outlines kept as Elasticsearch documents.

Holds the outline model (:mod:`.model`), entity-name normalisation (:mod:`.entities`), who may use a fact
(:mod:`.lineage`), where outlines persist (:mod:`.store`) and erasure by document (:mod:`.purge`).
May import the shared root (``errors``, ``types``, ``access``), ``store``, ``text`` and ``config``; never
``strategies``, ``api`` or the use cases.
"""
