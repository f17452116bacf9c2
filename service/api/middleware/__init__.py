"""The HTTP plumbing around the routes, outermost first: :mod:`.front` (hopsearch's own routes or the proxy
to the cluster: :mod:`.proxy`, over paths checked by :mod:`.espath`), :mod:`.gate` (API keys, body limit,
metrics) and :mod:`.fast_retrieve` (the ``_retrieve`` hot path)."""
