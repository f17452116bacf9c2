"""The Search-R1 wing: ``POST /retrieve`` in the shape Search-R1's retriever server answers."""
