"""The MCP wing: the tools served at ``/_mcp`` (:mod:`.tools`) and over stdio (:mod:`.stdio`)."""
