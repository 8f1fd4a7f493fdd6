"""The three step kinds: a tool step, a transform step, an LLM step.

A step is an immutable description; running it is the engine's job
(``_plan.py``). Each step has a ``kind`` and a ``name`` (shown in errors,
run journals and ``workflows show``) and describes itself for the workflow's
digest (:meth:`Step.describe`), which is what a resumed run is checked against.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from openfunctions.adapters import AIAdapter, ChatOptions, Message
from openfunctions.core import TOOL_NAME_RE, ToolDefinition, Validator
from openfunctions.core.errors import ToolDefinitionError

from ._errors import StepOutputInvalid, WorkflowDefinitionError


class Step:
    """Base of the step kinds. Build steps with :func:`tool_step`, :func:`transform`, :func:`llm_step`."""

    __slots__ = ()
    kind: str
    name: str

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name}


def _check_attempts(what: str, timeout: Any, retries: Any, retry_delay: Any) -> tuple[float | None, int, float]:
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
        raise WorkflowDefinitionError(f"{what}: timeout must be a positive number of seconds or None, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise WorkflowDefinitionError(f"{what}: retries must be an integer from 0 to 100, got {retries!r}")
    if isinstance(retry_delay, bool) or not isinstance(retry_delay, (int, float)) or not 0 <= retry_delay <= 3600:
        raise WorkflowDefinitionError(f"{what}: retry_delay must be 0 to 3600 seconds, got {retry_delay!r}")
    return (float(timeout) if timeout is not None else None), retries, float(retry_delay)


class ToolStep(Step):
    """Run a registered tool through the registry's executor (validation, policy, scheduling, receipt).

    ``params``: ``None`` passes the step's input as the arguments (it must be
    an object); a mapping is used as is; a callable builds them from the input
    (it must be pure: see the replay rules in docs/WORKFLOWS.md).

    ``timeout``: seconds an attempt may take; then it is cancelled (its receipt says ``cancelled``)
    and the attempt fails with cause ``workflow_step_timeout``. ``retries``: attempts after a failed
    one, ``retry_delay`` seconds apart — only when repeating is safe: a read tool's failure or
    timeout, or any tool's failure whose receipt says the effect certainly did not happen
    (``certainty`` ``known``); never a rejected call (bad arguments, policy) and never a non-read
    tool whose effect is unknown (a timeout, a crash in the handler): that fails the step.
    """

    __slots__ = ("kind", "name", "tool", "params", "timeout", "retries", "retry_delay")

    def __init__(self, tool: str | ToolDefinition, params: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None, *,
                 name: str | None = None, timeout: float | None = None, retries: int = 0, retry_delay: float = 0.0) -> None:
        if isinstance(tool, ToolDefinition):
            tool = tool.name
        if not isinstance(tool, str) or not TOOL_NAME_RE.match(tool):
            raise WorkflowDefinitionError(f"tool_step needs a tool name (1-128 of A-Z a-z 0-9 _ . -), got {tool!r}")
        if params is not None and not callable(params) and not isinstance(params, Mapping):
            raise WorkflowDefinitionError(
                f"tool_step {tool!r}: params must be None, a mapping or a function of the input, got {type(params).__name__}"
            )
        self.kind = "tool"
        self.tool = tool
        self.name = _check_name(name or tool)
        self.params = dict(params) if isinstance(params, Mapping) else params
        self.timeout, self.retries, self.retry_delay = _check_attempts(f"tool_step {tool!r}", timeout, retries, retry_delay)

    def params_for(self, value: Any) -> Any:
        p = self.params
        if p is None:
            return value
        if callable(p):
            return p(value)
        return p

    def describe(self) -> dict[str, Any]:
        return {"kind": "tool", "name": self.name, "tool": self.tool}

    def __repr__(self) -> str:
        return f"tool_step({self.tool!r})"


class Transform(Step):
    """A plain function of the previous result (sync or async). It must be quick, pure and deterministic."""

    __slots__ = ("kind", "name", "fn", "is_async")

    def __init__(self, fn: Callable[[Any], Any], *, name: str | None = None) -> None:
        if not callable(fn):
            raise WorkflowDefinitionError(f"transform needs a function, got {type(fn).__name__}")
        self.kind = "transform"
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
        self.name = _check_name(name or _fn_name(fn))

    def __repr__(self) -> str:
        return f"transform({self.name})"


class LLMStep(Step):
    """Ask a model: one ``chat`` call with an optional system prompt, the prompt built from the input.

    With ``output_schema`` the reply must be JSON (a fenced block is accepted)
    matching that schema, and the step's result is the parsed value; without
    it, the result is the reply text. ``adapter`` (an ``openfunctions.adapters.AIAdapter``: a provider
    adapter, the sampling adapter, or the scripted one) defaults to the run's. No tools are offered.
    ``timeout``/``retries``/``retry_delay``: as for a tool step; a model call has no effect, so any
    failure (an adapter error, a timeout, a reply that is not JSON or misses the schema) is retried.
    """

    __slots__ = ("kind", "name", "prompt", "system", "output_schema", "validator", "adapter", "options",
                 "timeout", "retries", "retry_delay")

    def __init__(
        self,
        prompt: str | Callable[[Any], str],
        *,
        system: str | None = None,
        output_schema: Mapping[str, Any] | None = None,
        adapter: AIAdapter | None = None,
        options: ChatOptions | None = None,
        name: str | None = None,
        timeout: float | None = None,
        retries: int = 0,
        retry_delay: float = 0.0,
    ) -> None:
        if options is not None and not isinstance(options, ChatOptions):
            raise WorkflowDefinitionError(f"llm_step: options must be an openfunctions.adapters.ChatOptions, got {type(options).__name__}")
        if not isinstance(prompt, str) and not callable(prompt):
            raise WorkflowDefinitionError(f"llm_step: prompt must be a string or a function of the input, got {type(prompt).__name__}")
        self.kind = "llm"
        self.prompt = prompt
        self.system = system
        self.adapter = adapter
        self.options = options
        self.name = _check_name(name or "llm")
        self.timeout, self.retries, self.retry_delay = _check_attempts(f"llm_step {self.name!r}", timeout, retries, retry_delay)
        self.output_schema = dict(output_schema) if output_schema is not None else None
        try:
            self.validator = Validator(self.output_schema, what=f"output_schema of llm_step {self.name!r}") if self.output_schema is not None else None
        except ToolDefinitionError as exc:
            raise WorkflowDefinitionError(exc.message) from None

    def messages_for(self, value: Any) -> list[Message]:
        if callable(self.prompt):
            text = self.prompt(value)
        elif "{input}" in self.prompt:
            text = self.prompt.replace("{input}", value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True))
        else:
            text = self.prompt
        if not isinstance(text, str):
            raise WorkflowDefinitionError(f"llm_step {self.name!r}: the prompt function returned {type(text).__name__}, not a string")
        out = [Message.system(self.system)] if self.system else []
        out.append(Message.user(text))
        return out

    def parse(self, text: Any, path: str) -> Any:
        if not isinstance(text, str):
            raise StepOutputInvalid(
                f"step {path} ({self.name}): the model's reply has no text (got {type(text).__name__})",
                details={"step": path, "name": self.name},
            )
        if self.validator is None:
            return text
        body = _FENCE.sub(r"\1", text.strip())
        try:
            value = json.loads(body)
        except ValueError as exc:
            raise StepOutputInvalid(
                f"step {path} ({self.name}): the model's reply is not JSON ({exc}): {text[:200]!r}",
                details={"step": path, "name": self.name},
            ) from None
        found = self.validator.violations(value)
        if found:
            shown = "; ".join(f"{v['path']}: {v['message']}" for v in found[:5])
            raise StepOutputInvalid(
                f"step {path} ({self.name}): the model's reply does not match the output schema: {shown}",
                details={"step": path, "name": self.name, "violations": found[:20]},
            )
        return value

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "llm", "name": self.name}
        if self.output_schema is not None:
            out["output_schema"] = self.output_schema
        return out

    def __repr__(self) -> str:
        return f"llm_step({self.name})"


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.S)
_NAME_RE = re.compile(r"^[^\x00-\x1f]{1,200}$")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise WorkflowDefinitionError(f"a step name must be 1-200 printable characters, got {name!r}")
    return name


def _fn_name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return name if isinstance(name, str) and name else "transform"


def tool_step(tool: str | ToolDefinition, params: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None, *,
              name: str | None = None, timeout: float | None = None, retries: int = 0, retry_delay: float = 0.0) -> ToolStep:
    """A step that runs ``tool`` (a name or a ToolDefinition registered in the run's registry);
    ``timeout``/``retries``/``retry_delay``: see :class:`ToolStep`."""
    return ToolStep(tool, params, name=name, timeout=timeout, retries=retries, retry_delay=retry_delay)


def transform(fn: Callable[[Any], Any], *, name: str | None = None) -> Transform:
    """A step that applies ``fn`` (sync or async) to the previous result."""
    return Transform(fn, name=name)


def llm_step(
    prompt: str | Callable[[Any], str],
    *,
    system: str | None = None,
    output_schema: Mapping[str, Any] | None = None,
    adapter: AIAdapter | None = None,
    options: ChatOptions | None = None,
    name: str | None = None,
    timeout: float | None = None,
    retries: int = 0,
    retry_delay: float = 0.0,
) -> LLMStep:
    """A step that asks a model. ``prompt`` is a string (``{input}`` is replaced by the input, JSON
    unless it is a string) or a function of the input; ``timeout``/``retries``/``retry_delay``: see
    :class:`LLMStep`."""
    return LLMStep(prompt, system=system, output_schema=output_schema, adapter=adapter, options=options, name=name,
                   timeout=timeout, retries=retries, retry_delay=retry_delay)


__all__ = ["LLMStep", "Step", "ToolStep", "Transform", "llm_step", "tool_step", "transform"]
