"""Traces: one document per answered question, every step of it — written while a strategy runs
(:mod:`.recorder`) and read back for its owner or an admin (:mod:`.reads`).

May import the shared root (``errors``, ``access``), ``store`` and ``llm``'s types; never ``api``.
"""
