"""Conversation and fact memory, served as tools. Being built (issue 13)."""
