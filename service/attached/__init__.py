"""Indices users already have: an attached index's field map and connector presets (:mod:`.fieldmap`) and
its checks against the index's mapping (:mod:`.checks`). Pure: the store keeps the records.

May import the shared root (``errors``, ``types``, ``access``), ``retrieval.filters`` and ``store``.
"""
