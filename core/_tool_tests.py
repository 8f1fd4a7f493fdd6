"""Tool tests: cases a tool's author ships with the definition, run through the executor.

A case (:class:`ToolTest`, or a mapping with the same keys) is::

    {"arguments": {...},            # the call's params
     "expect": {...},               # the result must equal this, or
     "match": {...},                # every key given must be equal (recursively; lists compared whole), and/or
     "check": callable,             # a predicate on the result: False or an AssertionError fails the case
     "error": "code",               # the call must fail with this error code (then no expect/match/check)
     "name": "short label"}

A case with none of ``expect``/``match``/``check``/``error`` passes when the
call succeeds. Results are the handler's JSON value (what
``ToolRegistry.execute`` returns).

Tests are **not** part of the tool's spec or its digest: they check the
implementation, as the handler is the implementation; the spec is the
contract a model and a receipt verifier read. Adding a case must not change
the digest that every receipt of the unchanged tool binds to (and a
predicate is code, which has no canonical JSON form).

:func:`run_tool_tests` runs every case of every tool in a registry, each
through the registry's executor (validation, policy, scheduling, journal,
receipt), one at a time in definition order. A case really calls the tool:
a write tool's cases should be refusals or aim at scratch data.
``openfunctions-mcp test --module M`` prints them as a table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ToolDefinitionError

if TYPE_CHECKING:
    from ._registry import ToolRegistry

_UNSET: Any = object()
_KEYS = frozenset({"arguments", "expect", "match", "check", "error", "name"})


@dataclass(frozen=True)
class ToolTest:
    """One case of a tool's tests (see the module docstring)."""

    arguments: Mapping[str, Any]
    expect: Any = _UNSET
    match: Mapping[str, Any] | None = None
    check: Callable[[Any], Any] | None = None
    error: str | None = None
    name: str | None = None

    @classmethod
    def of(cls, case: ToolTest | Mapping[str, Any], tool: str) -> ToolTest:
        """A case from a mapping (or itself), checked: a malformed case fails at definition time."""
        if isinstance(case, ToolTest):
            out = case
        elif isinstance(case, Mapping):
            unknown = sorted(set(case) - _KEYS)
            if unknown:
                raise ToolDefinitionError(f"tool {tool!r}: test case has unknown keys {unknown}; use {sorted(_KEYS)}")
            out = cls(**{k: v for k, v in case.items()})
        else:
            raise ToolDefinitionError(f"tool {tool!r}: a test case is a ToolTest or a mapping, got {type(case).__name__}")
        if not isinstance(out.arguments, Mapping):
            raise ToolDefinitionError(f"tool {tool!r}: a test case's arguments must be an object")
        if out.check is not None and not callable(out.check):
            raise ToolDefinitionError(f"tool {tool!r}: a test case's check must be callable")
        if out.match is not None and not isinstance(out.match, Mapping):
            raise ToolDefinitionError(f"tool {tool!r}: a test case's match must be an object")
        if out.error is not None and (out.expect is not _UNSET or out.match is not None or out.check is not None):
            raise ToolDefinitionError(f"tool {tool!r}: a test case expecting error {out.error!r} cannot also expect a result")
        return out


@dataclass(frozen=True)
class ToolTestResult:
    tool: str
    case: str
    passed: bool
    message: str
    outcome: str
    receipt_id: str
    duration_ms: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _matches(value: Any, pattern: Any, where: str = "$") -> str | None:
    """Where ``value`` departs from ``pattern`` (dicts compared by the pattern's keys), or None."""
    if isinstance(pattern, Mapping):
        if not isinstance(value, Mapping):
            return f"{where}: expected an object, got {type(value).__name__}"
        for k, v in pattern.items():
            if k not in value:
                return f"{where}.{k}: missing"
            problem = _matches(value[k], v, f"{where}.{k}")
            if problem:
                return problem
        return None
    return None if value == pattern else f"{where}: expected {pattern!r}, got {value!r}"


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _judge(case: ToolTest, value: Any, error: Any) -> tuple[bool, str]:
    code = getattr(error, "code", None)
    if case.error is not None:
        if error is None:
            return False, f"expected error {case.error!r}, the call succeeded: {_short(value)}"
        if code != case.error:
            return False, f"expected error {case.error!r}, got {code!r}: {getattr(error, 'message', error)}"
        return True, f"failed as expected ({code})"
    if error is not None:
        return False, f"{code}: {getattr(error, 'message', error)}"
    if case.expect is not _UNSET and value != case.expect:
        return False, f"expected {_short(case.expect)}, got {_short(value)}"
    if case.match is not None:
        problem = _matches(value, case.match)
        if problem:
            return False, problem
    if case.check is not None:
        try:
            verdict = case.check(value)
        except AssertionError as exc:
            return False, f"check failed: {exc}" if str(exc) else "check failed"
        except Exception as exc:
            return False, f"check raised {type(exc).__name__}: {exc}"
        if verdict is False:
            return False, f"check returned False for {_short(value)}"
    return True, "ok"


async def run_tool_tests(registry: ToolRegistry, *, names: Iterable[str] | None = None) -> list[ToolTestResult]:
    """Run the tests of ``registry``'s tools (or of ``names``) through its executor, in order."""
    wanted = set(names) if names is not None else None
    out: list[ToolTestResult] = []
    for tool in registry.list():
        if wanted is not None and tool.name not in wanted:
            continue
        for i, case in enumerate(tool.tests, start=1):
            t0 = time.perf_counter()
            detailed = await registry.execute_detailed(tool.name, dict(case.arguments))
            ms = (time.perf_counter() - t0) * 1000
            passed, message = _judge(case, detailed.value, detailed.error)
            out.append(ToolTestResult(tool.name, case.name or f"#{i}", passed, message, detailed.receipt.outcome,
                                      detailed.receipt.receipt_id, round(ms, 2)))
    return out


__all__ = ["ToolTest", "ToolTestResult", "run_tool_tests"]
