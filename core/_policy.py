"""Policy: who may run what, decided from the trusted context only.

Two modes. *Local* (the default) needs no policy, but refuses any tool whose
capability requires authority unless a policy validated the binding.
*Governed* cannot be constructed without a policy. Annotations
(``readOnlyHint`` …) are discovery hints and are never consulted here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from ._context import ToolExecutionContext
from ._tool import ToolDefinition

Mode = Literal["local", "governed"]


@dataclass(frozen=True)
class PolicyDecision:
    allowed: bool
    policy: str
    reason: str | None = None
    # True only when the policy checked the tool's required authority
    # against the trusted context (not just "no objection").
    binding_validated: bool = False


@runtime_checkable
class Policy(Protocol):
    name: str

    async def decide(self, tool: ToolDefinition, params: Mapping[str, Any], ctx: ToolExecutionContext) -> PolicyDecision: ...


class ScopePolicy:
    """Allows a call when the context's scopes cover the tool's required scopes."""

    name = "scopes"

    async def decide(self, tool: ToolDefinition, params: Mapping[str, Any], ctx: ToolExecutionContext) -> PolicyDecision:
        required = set(tool.capability.required_scopes) if tool.capability else set()
        missing = sorted(required - set(ctx.scopes))
        if missing:
            who = ctx.principal or "anonymous caller"
            return PolicyDecision(False, self.name, f"{who} lacks scope(s) {', '.join(missing)} required by tool {tool.name!r}")
        return PolicyDecision(True, self.name, None, binding_validated=bool(required))


class AllowAllPolicy:
    """Allows everything that needs no authority; validates no binding."""

    name = "allow-all"

    async def decide(self, tool: ToolDefinition, params: Mapping[str, Any], ctx: ToolExecutionContext) -> PolicyDecision:
        return PolicyDecision(True, self.name)


__all__ = ["Policy", "PolicyDecision", "ScopePolicy", "AllowAllPolicy", "Mode"]
