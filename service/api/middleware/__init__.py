"""The HTTP plumbing around the wings: :mod:`.gate` (API keys, body limit, metrics), :mod:`.fast_retrieve`
(the ``_retrieve`` hot path), :mod:`.viewer` (the viewer's cookie), :mod:`.mcp_path` and :mod:`.hosts`."""
