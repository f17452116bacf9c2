"""The application layer: the use cases every front end calls (:mod:`.usecases`), the runtime that wires
the store, embedder, retriever, LLM, trace sink and strategies (:mod:`.runtime`), and health (:mod:`.health`).

It imports the kernel (``service/``'s root) and the packages below it, never ``service/api``.
"""
