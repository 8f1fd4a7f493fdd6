"""Reply schemas from pydantic models: the one way work/ turns a reply model into the JSON Schema it serves."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A reply model's JSON Schema as served: pydantic's, without its generated titles and defaults."""

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: clean(v) for k, v in node.items() if k not in ("title", "default") or isinstance(v, dict)}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    schema: dict[str, Any] = clean(model.model_json_schema())
    schema.setdefault("required", [])
    return schema


__all__ = ["output_schema"]
