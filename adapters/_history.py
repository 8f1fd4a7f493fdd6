"""Replaying one conversation to any provider: the invariants every wire format shares.

The history is provider-neutral: a list of :class:`~._types.Message`
(user and system text, assistant turns with their tool calls, tool results
paired to a call by ``tool_call_id``), where whatever a provider issued that
only it understands (Anthropic ``thinking`` blocks and their signatures,
Gemini ``thoughtSignature``, Responses ``reasoning`` items, DeepSeek/Kimi
``reasoning_content``) is kept opaque, tagged with that provider
(``ProviderPart`` on the message, ``ToolCall.provider_data`` on a call).
The history can be written to JSON (``Message.to_dict``: a run record, a
saved chat) and read back after a restart, and it can be sent to a provider
other than the one that produced it.

Every adapter passes the history through :func:`replay_history` before it
writes its own wire form. What comes out holds, for every provider:

- **Pairing and order.** Each assistant turn with tool calls is followed at
  once by exactly one result per call, in the order of the calls. A result
  found later (after a user message that was sent mid-turn) moves up to its
  call; a call with no result (the process stopped mid-tool-turn, a call
  limit cut the turn short) gets a synthetic error result,
  :data:`NOT_RUN`, instead of being sent unpaired, which every provider
  refuses. A result whose call is not in the history (a window that cut the
  call off) is left out: no provider accepts it alone.
- **Ids.** A call id is unique within the request (Gemini numbers unnamed
  calls ``call_0``, ``call_1``… in every reply, so two turns may repeat
  one): a repeat is sent as ``<id>_2``, ``<id>_3``…, on the call and on its
  result. With ``safe_ids`` (Anthropic, whose ids must match
  ``[A-Za-z0-9_-]+``) an id with other characters (Kimi's
  ``functions.name:0``) is sent as ``call_`` + 24 hex of its SHA-256. A
  call the target provider issued itself keeps its id as issued. The same
  history always gives the same ids (a provider's prompt cache still hits).
- **Opaque parts.** Another provider's blocks are never sent (each adapter
  takes only its own with ``parts_of``); an assistant turn left with
  nothing to send (no text, no calls, none of this provider's blocks) is
  left out rather than sent empty.

The per-provider rules on top (Anthropic's thinking blocks first in the
turn, Gemini's signatures on the same part, Responses' reasoning items
before their call) are in each adapter's module docstring.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ._types import Message, ToolCall, parts_of

#: The result sent for a tool call that has none in the history.
NOT_RUN = ("[no result: this tool call was not run, or its run was interrupted before a result was recorded; "
           "do not assume it took effect]")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def replay_history(messages: Sequence[Message], provider: str, *, safe_ids: bool = False) -> list[Message]:
    """``messages`` as ``provider`` accepts them (see the module docstring); the input is not changed."""
    msgs = list(messages)
    out: list[Message] = []
    used: set[str] = set()
    i = 0
    while i < len(msgs):
        m = msgs[i]
        i += 1
        if m.role == "tool":
            continue  # its call is not before it: nothing to pair it with
        if m.role != "assistant":
            out.append(m)
            continue
        if not m.tool_calls:
            if m.content or parts_of(m.parts, provider):
                out.append(m)
            continue
        # The turn's results are among the messages up to the next assistant turn.
        end = i
        while end < len(msgs) and msgs[end].role != "assistant":
            end += 1
        window, i = msgs[i:end], end
        found: dict[str, list[Message]] = {}
        for w in window:
            if w.role == "tool" and w.tool_call_id is not None:
                found.setdefault(w.tool_call_id, []).append(w)
        calls = [_with_id(c, _fresh_id(c, used, provider, safe_ids)) for c in m.tool_calls]
        out.append(Message("assistant", m.content, tuple(calls), parts=m.parts))
        for old, new in zip(m.tool_calls, calls, strict=True):
            results = found.get(old.id)
            r = results.pop(0) if results else None
            out.append(Message("tool", r.content if r is not None else NOT_RUN, tool_call_id=new.id, name=new.name,
                               is_error=r.is_error if r is not None else True))
        out += [w for w in window if w.role != "tool"]
    return out


def _fresh_id(call: ToolCall, used: set[str], provider: str, safe: bool) -> str:
    cid = call.id
    if call.for_provider(provider):  # the target issued this call: its id goes back as issued
        used.add(cid)
        return cid
    if not cid or (safe and not _SAFE_ID.match(cid)):
        cid = "call_" + hashlib.sha256(cid.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    base, k = cid, 2
    while cid in used:
        cid, k = f"{base}_{k}", k + 1
    used.add(cid)
    return cid


def _with_id(call: ToolCall, cid: str) -> ToolCall:
    return call if cid == call.id else ToolCall(cid, call.name, call.arguments, call.provider_data)


__all__ = ["NOT_RUN", "replay_history"]
