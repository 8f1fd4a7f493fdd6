"""Model adapters: one normalized chat interface over providers and the MCP host's model (sampling). Being built (issue 12)."""
