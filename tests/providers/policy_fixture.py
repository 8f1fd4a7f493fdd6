"""A governed registry for ``serve --profile gateway --module policy_fixture:registry`` (tests/providers on PYTHONPATH).

Its policy refuses ``mcp__up__write_note`` to principal ``intern``; the
gateway mounts its upstreams into a registry sharing this executor.
"""

from __future__ import annotations

from openfunctions.core import PolicyDecision, ToolRegistry


class DenyWriteNoteForIntern:
    name = "deny-write-note-for-intern"

    async def decide(self, tool, params, ctx) -> PolicyDecision:
        if tool.name == "mcp__up__write_note" and ctx.principal == "intern":
            return PolicyDecision(False, self.name, f"{ctx.principal} may not run {tool.name}")
        return PolicyDecision(True, self.name)


registry = ToolRegistry(policy=DenyWriteNoteForIntern(), mode="governed")
