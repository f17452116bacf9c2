"""The Elasticsearch reverse-proxy wing: :mod:`.front` sends a request to hopsearch's own routes or on to
the cluster (:mod:`.forwarder`), over paths parsed by :mod:`.espath`, with the index names of each call
(:mod:`.esnames`) checked against what the caller may reach (:mod:`.managed`)."""
