"""Durable workflows: pipe/then/parallel/branch over tool, transform and LLM steps. Being built (issue 15)."""
