"""A seeded JSON-RPC message generator for the reliability suite (no dependency beyond ``random``).

:func:`messages` yields ``(body, expected_id)``: the bytes of one message and
the id a reply must carry (``None``: a reply may come with id null, or none
at all). Ids of well-formed requests are unique strings starting with ``f-``;
``notifications/cancelled`` only ever names ids that are never used, so no
fuzzed request loses its reply to a cancellation.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

# Tools that call back to the client (sampling, elicitation) or wait on purpose would stall a
# fuzzed call until its deadline: they are called with hostile arguments only, never valid ones.
_STALLING = ("sampling", "elicit", "slow", "wait", "reconnect", "long", "progress", "sleep", "stream")

_METHODS = [
    "ping", "tools/list", "tools/call", "resources/list", "resources/read", "resources/templates/list",
    "prompts/list", "prompts/get", "completion/complete", "logging/setLevel", "initialize", "server/discover",
    "tasks/get", "nope/unknown", "", " ", "tools/call\x00", "TOOLS/LIST", "rpc.discover",
    "tasks/update", "tasks/cancel", "subscriptions/listen", "resources/subscribe",
]
_NOTIFICATIONS = [
    "notifications/initialized", "notifications/cancelled", "notifications/progress",
    "notifications/roots/list_changed", "notifications/unknown",
]


def _text(rng: random.Random, n: int | None = None) -> str:
    n = rng.choice([0, 1, 5, 20, 200]) if n is None else n
    alphabet = rng.choice([
        "abcxyz", "0123456789", " \t\n\r", '"\\/{}[]:,', "éß漢字🙂", "\x00\x01\x1f\x7f", "../../etc/passwd",
    ])
    return "".join(rng.choice(alphabet) for _ in range(n))


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(10 if depth < 4 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, 2**63, -(2**64), 10**30])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e-300, 3.14])
    if kind in (4, 5, 6):
        return _text(rng)
    if kind in (7, 8):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {_text(rng, rng.randrange(1, 8)): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _arguments(rng: random.Random, schema: dict[str, Any]) -> Any:
    props = (schema or {}).get("properties") or {}
    if rng.random() < 0.15:
        return _value(rng)  # not even an object
    args: dict[str, Any] = {}
    for name, spec in props.items():
        if rng.random() < 0.3:
            continue
        t = spec.get("type") if isinstance(spec, dict) else None
        if rng.random() < 0.7 and t == "string":
            args[name] = spec["enum"][0] if spec.get("enum") else _text(rng)
        elif rng.random() < 0.7 and t == "integer":
            args[name] = rng.choice([0, 1, 7, -3, 10**12])
        else:
            args[name] = _value(rng)
    if rng.random() < 0.2:
        args[_text(rng, 4) or "x"] = _value(rng)
    return args


def _deep(rng: random.Random) -> bytes:
    depth = rng.choice([150, 199, 201, 500, 977, 978, 2000, 20000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    inner = opener * depth + "1" + closer * depth
    if rng.random() < 0.5:
        return inner.encode()
    rid = f'"f-deep-{rng.randrange(10**9)}"'
    return ('{"jsonrpc":"2.0","id":' + rid + ',"method":"tools/call","params":{"name":"x","arguments":{"d":' + inner + "}}}").encode()


def messages(
    rng: random.Random,
    count: int,
    tools: list[dict[str, Any]],
    *,
    wrap_params: Callable[[dict[str, Any]], dict[str, Any]] = lambda p: p,
) -> Iterator[tuple[bytes, str | None]]:
    callable_tools = [t for t in tools if not any(w in t["name"].lower() for w in _STALLING)]
    for i in range(count):
        rid = f"f-{i}-{rng.randrange(10**6)}"
        roll = rng.random()
        if roll < 0.30 and tools:
            pool = callable_tools if callable_tools and rng.random() < 0.9 else tools
            tool = rng.choice(pool)
            stalls = tool not in callable_tools
            params: dict[str, Any] = {"name": tool["name"], "arguments": _arguments(rng, tool.get("inputSchema", {}))}
            if stalls:
                params["arguments"] = {"__fuzz__": _value(rng)} if rng.random() < 0.5 else 7
            msg = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": wrap_params(params)}
            # A stalling tool given hostile arguments is refused by validation; if it has no
            # schema to refuse them, its reply may never come: do not wait for one.
            yield json.dumps(msg).encode(), (None if stalls else rid)
        elif roll < 0.50:
            method = rng.choice(_METHODS)
            if method in ("initialize",):
                method = "ping"
            params = _value(rng) if rng.random() < 0.2 else {
                "uri": _text(rng), "name": rng.choice([_text(rng), "of_hash_text"]), "level": rng.choice(["debug", "bogus", 5]),
                "arguments": _value(rng), "cursor": _text(rng),
            }
            msg = {"jsonrpc": "2.0", "id": rid, "method": method}
            if rng.random() < 0.9:
                msg["params"] = wrap_params(params) if isinstance(params, dict) else params
            yield json.dumps(msg).encode(), rid
        elif roll < 0.58:
            bad = rng.choice([None, True, False, 1.5, -0.0, {}, [1], {"id": 1}, [], 1e100])
            msg = {"jsonrpc": "2.0", "id": bad, "method": rng.choice(_METHODS[:4])}
            yield json.dumps(msg).encode(), None
        elif roll < 0.68:
            method = rng.choice(_NOTIFICATIONS)
            params = {"requestId": rng.choice([{"a": 1}, [1], None, 1.5, "never-used", -42, _value(rng)]),
                      "progressToken": _value(rng), "progress": _value(rng), "reason": _value(rng)}
            msg = {"jsonrpc": "2.0", "method": method}
            if rng.random() < 0.8:
                msg["params"] = params
            yield json.dumps(msg).encode(), None
        elif roll < 0.73:
            msg = {"jsonrpc": "2.0", "id": rng.choice(["never-used", -7, 10**20]),
                   rng.choice(["result", "error"]): _value(rng)}
            yield json.dumps(msg).encode(), None
        elif roll < 0.78:
            yield _deep(rng), None
        else:
            yield _malformed(rng), None


def _malformed(rng: random.Random) -> bytes:
    k = rng.randrange(12)
    if k == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))).replace(b"\n", b" ")
    if k == 1:
        good = json.dumps({"jsonrpc": "2.0", "id": "f-trunc", "method": "ping"}).encode()
        return good[: rng.randrange(1, len(good))]
    if k == 2:
        return json.dumps(_value(rng)).encode()
    if k == 3:
        return json.dumps([{"jsonrpc": "2.0", "id": "f-batch", "method": "ping"}] * rng.randrange(1, 4)).encode()
    if k == 4:
        return json.dumps({"jsonrpc": rng.choice(["1.0", 2, None, "2.0 "]), "id": 1, "method": "ping"}).encode()
    if k == 5:
        return json.dumps({"jsonrpc": "2.0", "id": 1, "method": _value(rng) or 5}).encode()
    if k == 6:
        return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1, 2]}).encode()
    if k == 7:
        return b'{"jsonrpc":"2.0","id":"f-s","method":"ping","params":{"x":"\\ud800\\udfff\\ud800"}}'
    if k == 8:
        return ('{"jsonrpc":"2.0","id":"f-big","method":"tools/call","params":{"name":"of_hash_text","arguments":{"text":"'
                + "A" * rng.choice([10_000, 100_000]) + '"}}}').encode()
    if k == 9:
        return b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}'
    if k == 10:
        return b"\xef\xbb\xbf" + json.dumps({"jsonrpc": "2.0", "id": "f-bom", "method": "ping"}).encode()
    return b"{" * rng.randrange(1, 50)


#: Names of Python exceptions that must never reach a client (a leaked internal error).
LEAK_MARKERS = (
    "Traceback (most recent call last)", "TypeError", "KeyError", "AttributeError", "RecursionError",
    "IndexError", "UnicodeDecodeError", "UnicodeEncodeError", "AssertionError", "NameError", "ZeroDivisionError",
)


def check_reply(msg: Any) -> str | None:
    """Why ``msg`` is not a well-formed JSON-RPC message from a server (``None``: it is)."""
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return "not a JSON-RPC 2.0 object"
    if "method" in msg:
        return None if isinstance(msg["method"], str) else "method is not a string"
    if "id" not in msg:
        return "a response without an id"
    if ("result" in msg) == ("error" in msg):
        return "a response needs exactly one of result and error"
    if "error" in msg:
        err = msg["error"]
        if not isinstance(err, dict) or not isinstance(err.get("code"), int) or not isinstance(err.get("message"), str):
            return "error needs an integer code and a string message"
    text = json.dumps(msg.get("error", "")) + json.dumps(msg.get("result", {}).get("content", "") if isinstance(msg.get("result"), dict) else "")
    for marker in LEAK_MARKERS:
        if marker in text:
            return f"leaks {marker!r}"
    return None
