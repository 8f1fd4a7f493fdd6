"""Context providers and the MCP gateway. Being built (issue 14)."""
