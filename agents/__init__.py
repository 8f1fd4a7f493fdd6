"""Agents, crews and run records over the one executor path. Being built (issue 12)."""
