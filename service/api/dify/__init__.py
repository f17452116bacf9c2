"""Dify's External Knowledge API (``POST /retrieval``): :mod:`.routes`."""
