"""Request validation the wire-format fakes play: what current reasoning models refuse.

Each rule is a ``WireServer.check``: given a request record and the replies
the fake sent so far, it returns the provider's refusal (sent as HTTP 400) or
``None``. The rules read the fake's own earlier replies, so they hold the
adapter to what *this* provider issued, byte for byte:

- :func:`gemini`: a ``thoughtSignature`` the fake issued on a part must come
  back on the same part, unchanged, at part level (not inside
  ``functionCall``); a signature it never issued is corrupt; Google's
  documented placeholder skips the check. :func:`gemini3`
  adds Gemini 3's rule: the first ``functionCall`` part of every model turn is
  signed (an issued signature or Google's documented placeholder).
- :func:`anthropic`: an assistant turn holding a ``tool_use`` the fake issued
  alongside thinking must start with exactly those ``thinking`` /
  ``redacted_thinking`` blocks (dropped: wrong first block; altered: invalid
  signature).
- :func:`openai_reasoning`: a reasoning model refuses ``max_tokens``,
  ``temperature``, ``top_p`` and ``stop``.
- :func:`responses`: ``store: false`` requests must carry each
  ``function_call``'s reasoning items (unchanged, encrypted content included)
  before it, and each ``function_call_output`` must follow its call.
- :func:`deepseek`: an assistant turn with tool calls must carry the
  ``reasoning_content`` its reply had; one without tool calls must not carry
  any (the stricter ``deepseek-reasoner`` rule).

Pairing (a history replayed, perhaps from another provider or after a restart):

- :func:`openai_pairing`: an assistant message with ``tool_calls`` is followed
  by a ``tool`` message for each id; a ``tool`` message answers the calls of
  the message before the results.
- :func:`anthropic_pairing`: each ``tool_use`` is answered by a
  ``tool_result`` in the next (user) message, those blocks first, each naming
  a ``tool_use`` of the message before; ids match ``[a-zA-Z0-9_-]+``; no empty
  message; a thinking block this fake never issued has an invalid signature;
  with thinking on, the tool-use turn the request continues starts with a
  thinking block; then :func:`anthropic`.
- :func:`gemini_pairing`: no empty ``parts``; a ``functionResponse`` turn has
  as many parts as the ``functionCall`` turn before it, which is followed by
  one; a ``thought`` signature this fake never issued is corrupt; then
  :func:`gemini`.
- :func:`responses_pairing`: each ``function_call`` has its
  ``function_call_output`` later in the input; then :func:`responses`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._wire import Reply


def payloads(reply: Reply) -> list[dict[str, Any]]:
    """The JSON objects one reply carried: its body, or its stream's data lines."""
    if reply.sse is None:
        return [reply.body] if isinstance(reply.body, dict) else []
    out = []
    for block in reply.sse:
        for line in block.splitlines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                out.append(json.loads(line[5:]))
    return out


SKIP = "skip_thought_signature_validator"


# -- Gemini ------------------------------------------------------------------------------------------------
def _part_key(part: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in part.items() if k != "thoughtSignature"}, sort_keys=True)


def gemini(req: dict[str, Any], sent: list[Reply]) -> str | None:
    issued: dict[str, str] = {}
    for reply in sent:
        for obj in payloads(reply):
            for cand in obj.get("candidates") or []:
                for part in (cand.get("content") or {}).get("parts") or []:
                    if "thoughtSignature" in part:
                        issued[_part_key(part)] = part["thoughtSignature"]
    for i, content in enumerate(req["json"].get("contents") or []):
        if content.get("role") != "model":
            continue
        for j, part in enumerate(content.get("parts") or []):
            if "thoughtSignature" in (part.get("functionCall") or {}):
                return f'Invalid JSON payload received. Unknown name "thoughtSignature" at contents[{i}].parts[{j}].function_call'
            got = part.get("thoughtSignature")
            if got == SKIP:  # Google's placeholder: validation skipped
                continue
            if got is not None and got not in issued.values():
                return f"Corrupted thought signature at contents[{i}].parts[{j}]."
            want = issued.get(_part_key(part))
            if want is not None and got != want:
                return (f"Function call is missing a thought_signature in functionCall parts. "
                        f"Additional data, function call `default_api:{(part.get('functionCall') or {}).get('name')}`, "
                        f"position {i}.{j}" if "functionCall" in part else
                        f"thought_signature of contents[{i}].parts[{j}] does not match the one issued")
    return None


def gemini3(req: dict[str, Any], sent: list[Reply]) -> str | None:
    for i, content in enumerate(req["json"].get("contents") or []):
        calls = [p for p in content.get("parts") or [] if "functionCall" in p] if content.get("role") == "model" else []
        if calls and "thoughtSignature" not in calls[0]:
            return (f"Function call is missing a thought_signature in functionCall parts. Additional data, function call "
                    f"`default_api:{calls[0]['functionCall'].get('name')}`, position {i}")
    return gemini(req, sent)


# -- Anthropic -----------------------------------------------------------------------------------------------
def _anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    if reply.sse is None:
        return list(reply.body.get("content") or []) if isinstance(reply.body, dict) else []
    blocks: dict[int, dict[str, Any]] = {}
    for obj in payloads(reply):
        if obj.get("type") == "content_block_start":
            blocks[obj["index"]] = dict(obj["content_block"])
        elif obj.get("type") == "content_block_delta":
            b, d = blocks[obj["index"]], obj["delta"]
            field = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature",
                     "input_json_delta": "_json"}[d["type"]]
            value = d.get("partial_json") if field == "_json" else d[field]
            b[field] = b.get(field, "") + value
    out = []
    for _, b in sorted(blocks.items()):
        if "_json" in b:
            b["input"] = json.loads(b.pop("_json"))
        out.append(b)
    return out


def anthropic(req: dict[str, Any], sent: list[Reply]) -> str | None:
    thinking_for: dict[str, list[dict[str, Any]]] = {}
    for reply in sent:
        blocks = _anthropic_blocks(reply)
        thinks = [b for b in blocks if b.get("type") in ("thinking", "redacted_thinking")]
        for b in blocks:
            if b.get("type") == "tool_use" and thinks:
                thinking_for[b["id"]] = thinks
    for i, m in enumerate(req["json"].get("messages") or []):
        if m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        want = next((thinking_for[b["id"]] for b in m["content"] if b.get("type") == "tool_use" and b["id"] in thinking_for),
                    None)
        if want is None:
            continue
        got = m["content"][:len(want)]
        if [b.get("type") for b in got] != [b["type"] for b in want]:
            found = got[0].get("type") if got else "nothing"
            return (f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. "
                    "When `thinking` is enabled, a final `assistant` message must start with a thinking block.")
        if got != want:
            return f"messages.{i}.content: Invalid `signature` in `thinking` block"
    return None


# -- OpenAI Chat Completions, reasoning model ------------------------------------------------------------------
def openai_reasoning(req: dict[str, Any], sent: list[Reply]) -> str | None:
    for key in ("max_tokens", "temperature", "top_p", "stop"):
        if key in req["json"]:
            hint = " Use 'max_completion_tokens' instead." if key == "max_tokens" else ""
            return f"Unsupported parameter: '{key}' is not supported with this model.{hint}"
    return None


# -- OpenAI Responses -------------------------------------------------------------------------------------------
def _responses_output(reply: Reply) -> list[dict[str, Any]]:
    for obj in payloads(reply):
        if "output" in obj:
            return list(obj["output"])
        if obj.get("type") in ("response.completed", "response.incomplete"):
            return list(obj["response"].get("output") or [])
    return []


def responses(req: dict[str, Any], sent: list[Reply], *, reasoning_model: bool = True) -> str | None:
    body = req["json"]
    if reasoning_model:
        for key in ("max_tokens", "max_completion_tokens", "temperature", "top_p"):
            if key in body:
                return f"Unsupported parameter: '{key}' is not supported with this model."
    issued: dict[str, list[dict[str, Any]]] = {}
    all_reasoning: list[dict[str, Any]] = []
    for reply in sent:
        output = _responses_output(reply)
        thinks = [it for it in output if it.get("type") == "reasoning"]
        all_reasoning += thinks
        for it in output:
            if it.get("type") == "function_call":
                issued[it["call_id"]] = thinks
    items = body.get("input") or []
    for idx, item in enumerate(items):
        kind = item.get("type")
        if kind == "reasoning" and item not in all_reasoning:
            return f"The encrypted content for item {item.get('id')} could not be verified."
        if kind == "function_call":
            before = [x for x in items[:idx] if x.get("type") == "reasoning"]
            for r in issued.get(item["call_id"], []):
                if r not in before:
                    return (f"Item '{item.get('id')}' of type 'function_call' was provided without its required "
                            f"'reasoning' item: '{r['id']}'.")
        if kind == "function_call_output" and not any(
                x.get("type") == "function_call" and x.get("call_id") == item.get("call_id") for x in items[:idx]):
            return f"No tool call found for function call output with call_id {item.get('call_id')}."
    return None


# -- DeepSeek / Kimi ----------------------------------------------------------------------------------------------
def deepseek(req: dict[str, Any], sent: list[Reply]) -> str | None:
    reasoning_for: dict[str, str] = {}
    for reply in sent:
        thought, ids = "", []
        for obj in payloads(reply):
            for choice in obj.get("choices") or []:
                msg = choice.get("message") or choice.get("delta") or {}
                thought += msg.get("reasoning_content") or ""
                ids += [c["id"] for c in msg.get("tool_calls") or [] if c.get("id")]
        for call_id in ids:
            if thought:
                reasoning_for[call_id] = thought
    for i, m in enumerate(req["json"].get("messages") or []):
        if m.get("role") != "assistant":
            continue
        ids = [c["id"] for c in m.get("tool_calls") or []]
        want = next((reasoning_for[x] for x in ids if x in reasoning_for), None)
        if want is not None and m.get("reasoning_content") != want:
            return f'messages[{i}]: The "reasoning_content" in the thinking mode must be passed back to the API.'
        if not ids and "reasoning_content" in m:
            return f"messages[{i}]: reasoning_content is not accepted on an assistant message without tool calls"
    return None


# -- Pairing: every provider's tool-call/result invariants (what a replayed history must hold) -------------------
def all_of(*rules: Any) -> Any:
    """One check that refuses with the first rule that refuses."""
    def check(req: dict[str, Any], sent: list[Reply]) -> str | None:
        return next((r for r in (rule(req, sent) for rule in rules) if r is not None), None)
    return check


def openai_pairing(req: dict[str, Any], sent: list[Reply]) -> str | None:
    msgs = req["json"].get("messages") or []
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            want = [c["id"] for c in m["tool_calls"]]
            got = [x.get("tool_call_id") for x in msgs[i + 1:i + 1 + len(want)] if x.get("role") == "tool"]
            missing = [c for c in want if c not in got]
            if missing:
                return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(missing)}")
        if m.get("role") == "tool":
            prev = next((x for x in reversed(msgs[:i]) if x.get("role") != "tool"), {})
            if m.get("tool_call_id") not in [c["id"] for c in prev.get("tool_calls") or []]:
                return (f"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                        f"'tool_calls'. (messages[{i}])")
    return None


_ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def anthropic_pairing(req: dict[str, Any], sent: list[Reply]) -> str | None:
    body = req["json"]
    msgs = body.get("messages") or []
    issued = [b for reply in sent for b in _anthropic_blocks(reply) if b.get("type") in ("thinking", "redacted_thinking")]
    for i, m in enumerate(msgs):
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        if not m.get("content"):
            return f"messages.{i}: all messages must have non-empty content except for the optional final assistant message"
        for j, b in enumerate(blocks):
            if b.get("type") == "tool_use" and not _ANTHROPIC_ID.match(b.get("id") or ""):
                return f"messages.{i}.content.{j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            if b.get("type") in ("thinking", "redacted_thinking") and b not in issued:
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if m.get("role") == "assistant" and uses:
            nxt = msgs[i + 1]["content"] if i + 1 < len(msgs) and isinstance(msgs[i + 1].get("content"), list) else []
            answered = [b.get("tool_use_id") for b in nxt if b.get("type") == "tool_result"]
            missing = [u for u in uses if u not in answered]
            if missing:
                return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                        f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
                        "in the next message.")
        if m.get("role") == "user":
            before = msgs[i - 1] if i > 0 else {}
            ids = [b.get("id") for b in before.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_use"]
            seen_other = False
            for j, b in enumerate(blocks):
                if b.get("type") != "tool_result":
                    seen_other = True
                    continue
                if seen_other:
                    return f"messages.{i}.content.{j}: tool_result blocks must come first in the user message"
                if b.get("tool_use_id") not in ids:
                    return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{b.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` "
                            "block in the previous message.")
    if (body.get("thinking") or {}).get("type") == "enabled":
        for i in range(len(msgs) - 1, -1, -1):
            m = msgs[i]
            if m["role"] == "user" and not any(b.get("type") == "tool_result" for b in m["content"]):
                break
            if m["role"] == "assistant":
                blocks = m["content"]
                if any(b.get("type") == "tool_use" for b in blocks) and blocks[0].get("type") not in (
                        "thinking", "redacted_thinking"):
                    return (f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                            f"`{blocks[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must "
                            "start with a thinking block.")
                break
    return anthropic(req, sent)


def gemini_pairing(req: dict[str, Any], sent: list[Reply]) -> str | None:
    contents = req["json"].get("contents") or []
    for i, c in enumerate(contents):
        parts = c.get("parts") or []
        if not parts:
            return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        calls = [p for p in parts if "functionCall" in p]
        responses = [p for p in parts if "functionResponse" in p]
        if responses:
            prev = contents[i - 1] if i > 0 else {}
            asked = [p for p in prev.get("parts") or [] if "functionCall" in p] if prev.get("role") == "model" else []
            if len(responses) != len(asked):
                return ("Please ensure that the number of function response parts is equal to the number of function "
                        "call parts of the function call turn.")
        if calls:
            nxt = contents[i + 1] if i + 1 < len(contents) else None
            if nxt is not None and not any("functionResponse" in p for p in nxt.get("parts") or []):
                return ("Please ensure that function call turn comes immediately after a user turn or after a "
                        "function response turn.")
    for i, c in enumerate(contents):
        for j, p in enumerate(c.get("parts") or []):
            if p.get("thought") and "thoughtSignature" in p and not any(
                    p.get("thoughtSignature") == q.get("thoughtSignature")
                    for reply in sent for obj in payloads(reply) for cand in obj.get("candidates") or []
                    for q in (cand.get("content") or {}).get("parts") or []):
                return f"Corrupted thought signature at contents[{i}].parts[{j}]."
    return gemini(req, sent)


def responses_pairing(req: dict[str, Any], sent: list[Reply]) -> str | None:
    items = req["json"].get("input") or []
    for idx, item in enumerate(items):
        if item.get("type") == "function_call" and not any(
                x.get("type") == "function_call_output" and x.get("call_id") == item["call_id"] for x in items[idx + 1:]):
            return f"No tool output found for function call {item['call_id']}."
    return responses(req, sent, reasoning_model=False)
