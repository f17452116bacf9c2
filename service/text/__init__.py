"""Language handling without a model: a text's language from its script (:mod:`.lang`) and Japanese BM25
analysis — SudachiPy tokens, variant-kanji folding, synonyms (:mod:`.japanese`).

May import only ``errors``.
"""
