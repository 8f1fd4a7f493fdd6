"""Provider tool formats: pure translations of registered tools.

- OpenAI (Chat Completions / Responses "function" tools):
  ``{"type": "function", "function": {"name", "description", "parameters"}}``
- Anthropic Messages API: ``{"name", "description", "input_schema"}``
- Gemini: ``{"functionDeclarations": [{"name", "description", "parameters"}]}``
  where ``parameters`` is the OpenAPI 3.0 schema subset Gemini accepts:
  local ``$ref`` inlined, and keywords it rejects (``$schema``,
  ``additionalProperties``, ``$defs`` …) dropped.
"""

from __future__ import annotations

import copy
from typing import Any

from ._tool import ToolDefinition


def to_openai(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": copy.deepcopy(tool.input_schema)},
    }


def to_anthropic(tool: ToolDefinition) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": copy.deepcopy(tool.input_schema)}


_GEMINI_KEYS = {
    "type", "format", "description", "nullable", "enum", "properties", "required", "items",
    "minItems", "maxItems", "minimum", "maximum", "anyOf", "propertyOrdering", "title",
    "minLength", "maxLength", "pattern", "minProperties", "maxProperties", "default", "example",
}


def _gemini_schema(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    if depth > 32 or not isinstance(node, dict):
        return node
    if "$ref" in node and isinstance(node["$ref"], str) and node["$ref"].startswith("#/$defs/"):
        target = defs.get(node["$ref"].split("/")[-1], {})
        return _gemini_schema(target, defs, depth + 1)
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k not in _GEMINI_KEYS:
            continue
        if k == "properties" and isinstance(v, dict):
            out[k] = {pk: _gemini_schema(pv, defs, depth + 1) for pk, pv in v.items()}
        elif k == "items":
            out[k] = _gemini_schema(v, defs, depth + 1)
        elif k == "anyOf" and isinstance(v, list):
            # Optional[X] from pydantic is anyOf [X, null]: Gemini spells it nullable.
            non_null = [x for x in v if not (isinstance(x, dict) and x.get("type") == "null")]
            if len(non_null) == 1 and len(non_null) < len(v):
                out.update(_gemini_schema(non_null[0], defs, depth + 1))
                out["nullable"] = True
            else:
                out[k] = [_gemini_schema(x, defs, depth + 1) for x in v]
        elif k == "type" and isinstance(v, list):
            types = [t for t in v if t != "null"]
            out["type"] = types[0] if types else "null"
            if "null" in v:
                out["nullable"] = True
        else:
            out[k] = copy.deepcopy(v)
    return out


def to_gemini(tools: list[ToolDefinition]) -> dict[str, Any]:
    decls = []
    for t in tools:
        defs = t.input_schema.get("$defs", {}) or {}
        decls.append({"name": t.name, "description": t.description, "parameters": _gemini_schema(t.input_schema, defs)})
    return {"functionDeclarations": decls}


__all__ = ["to_openai", "to_anthropic", "to_gemini"]
