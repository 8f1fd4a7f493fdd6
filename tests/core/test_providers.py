"""Provider formats against each provider's documented tool shape."""

import json

from openfunctions.core import ToolRegistry, define_tool, tool


@tool()
def search(query: str, limit: int | None = None, tags: list[str] = []) -> dict:  # noqa: B006  (a schema default the decorator reads; never mutated)
    """Search the notes."""
    return {}


plain = define_tool(
    name="plain", description="Plain tool",
    input_schema={"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                  "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
    handler=lambda p, c: {},
)
reg = ToolRegistry([search, plain])


def test_openai_function_tools():
    out = reg.to_openai_format()
    assert out[1] == {"type": "function", "function": {"name": "plain", "description": "Plain tool", "parameters": plain.input_schema}}
    assert set(out[0]["function"]) == {"name", "description", "parameters"}
    json.dumps(out)


def test_anthropic_tools():
    out = reg.to_anthropic_format()
    assert out[1] == {"name": "plain", "description": "Plain tool", "input_schema": plain.input_schema}
    assert out[0]["input_schema"]["properties"]["query"]["type"] == "string"


def test_gemini_function_declarations_use_the_openapi_subset():
    out = reg.to_gemini_format()
    decls = out["functionDeclarations"]
    assert [d["name"] for d in decls] == ["search", "plain"]
    p = decls[1]["parameters"]
    assert "$schema" not in p and "additionalProperties" not in p
    assert p == {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    limit = decls[0]["parameters"]["properties"]["limit"]
    assert limit["type"] == "integer" and limit["nullable"] is True and "anyOf" not in limit
    assert decls[0]["parameters"]["properties"]["tags"]["items"] == {"type": "string"}


def test_translations_do_not_alias_the_registered_schema():
    out = reg.to_openai_format()
    out[1]["function"]["parameters"]["properties"]["a"]["type"] = "integer"
    assert plain.input_schema["properties"]["a"]["type"] == "string"
