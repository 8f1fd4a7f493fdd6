"""The tools bench/bench_replicas.py serves (``--module _replica_tools:registry``, bench/ on PYTHONPATH).

- ``ps_read``: a declared, parallel-safe read (``effect: read``): no start record, only its receipt is
  journaled; calls of one process run side by side.
- ``noop``: an unclassified tool (no capability): a registry-wide barrier in its process (one at a time),
  with a start and a receipt journaled per call.

Both return at once, so the figures are the serving and journaling path, not handler work.
"""

from __future__ import annotations

from openfunctions.core import ToolRegistry, define_tool

_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}

registry = ToolRegistry([
    define_tool(name="ps_read", description="a parallel-safe read that returns at once", input_schema=_SCHEMA,
                capability={"effect": "read", "parallel_safe": True, "idempotent": True},
                handler=lambda params, ctx: {"n": params.get("n", 0)}, blocking=False),
    define_tool(name="noop", description="an unclassified call that returns at once", input_schema=_SCHEMA,
                handler=lambda params, ctx: {"n": params.get("n", 0)}, blocking=False),
])
