"""openfunctions.engine: one agent session over a durable record stream, served over stdin/stdout JSONL.

A :class:`Session` runs turns of rounds (the model, then its tool calls through the executor, journal
on), takes steering between rounds, compacts its context into a summary record (on request, or at a
token ceiling estimated per adapter), ends a turn when the model calls ``finish`` or answers with text,
and writes every step to its session stream (:mod:`._records` has the format). Started again with its
id, a session continues from its last settled round; a tool call whose result was not recorded is
reported uncertain, with its executor receipt, and never run again.

Usage::

    from openfunctions.engine import Session, SessionConfig

    async with await Session.open(SessionConfig(adapter=adapter, data_dir=path, tools=tools), emit=print) as s:
        s.prompt("add 2 and 3")
        s.close_when_idle()
        await s.work()

From the shell: ``openfunctions-mcp engine`` (docs/ENGINE.md; the protocol: docs/formats/engine.md).
"""

from ._errors import (
    BadCommand,
    EngineConfigError,
    EngineError,
    SessionCorrupt,
    SessionInvalid,
    SessionNotFound,
    VerdictInvalid,
)
from ._records import SessionState
from ._review import VERDICT_SCHEMA, review_task
from ._scripted import ScriptFileAdapter
from ._session import FINISH_TOOL, Limits, Session, SessionConfig

__all__ = [
    "BadCommand", "EngineConfigError", "EngineError", "FINISH_TOOL", "Limits", "ScriptFileAdapter", "Session",
    "SessionConfig", "SessionCorrupt", "SessionInvalid", "SessionNotFound", "SessionState", "VERDICT_SCHEMA",
    "VerdictInvalid", "review_task",
]
