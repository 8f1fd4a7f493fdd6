"""Retrieval over ingested documents, served as tools. Being built (issue 13)."""
