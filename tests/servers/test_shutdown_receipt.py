"""A call cancelled by a server shutdown is answered with its receipt, the journaled one.

A real server subprocess (stdio and HTTP) runs the fixture's ``slow`` tool; a
SIGTERM starts the drain, the shutdown timeout runs out, the call is
cancelled. The client's reply says the server shut down, carries the receipt
in ``_meta`` (outcome ``cancelled``, certainty ``unknown``: the handler had
started), and that receipt is byte-for-byte the one in the execution journal.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from openfunctions.core.journal import read_records
from openfunctions.servers import RECEIPT_META_KEY

from .conftest import wait_for_file
from .test_http import parse_body, post, rpc

pytestmark = pytest.mark.slow


def _journaled(data_dir: Path, receipt_id: str) -> list[dict]:
    return [
        rec.data
        for f in sorted((data_dir / "journal").glob("*.journal"))
        for rec in read_records(f)
        if rec.type == "receipt" and rec.data.get("receipt_id") == receipt_id
    ]


def _check(reply: dict, markers: Path, data_dir: Path) -> None:
    assert reply["isError"] is True
    assert "the server shut down before it finished" in reply["content"][0]["text"]
    receipt = reply["_meta"][RECEIPT_META_KEY]
    assert receipt["receipt_id"] == (markers / "started").read_text()  # the handler's own call
    assert (receipt["outcome"], receipt["certainty"], receipt["handler_started"]) == ("cancelled", "unknown", True)
    assert (markers / "cancelled").exists() and not (markers / "finished").exists()
    assert _journaled(data_dir, receipt["receipt_id"]) == [receipt]


def test_stdio_shutdown_cancelled_call_is_answered_with_its_journaled_receipt(raw_stdio, tmp_path):
    markers = tmp_path / "m"
    s = raw_stdio("--shutdown-timeout", "0.3")
    s.initialize()
    rid = s.start_slow(markers)
    s.proc.send_signal(signal.SIGTERM)
    msg = s.response(rid)
    assert s.proc.wait(timeout=30) == 0
    _check(msg["result"], markers, tmp_path / "data")


def test_http_shutdown_cancelled_call_is_answered_with_its_journaled_receipt(http_server, tmp_path):
    url, proc = http_server("--stateless", "--shutdown-timeout", "0.3")
    markers = tmp_path / "m"
    out: dict = {}

    def call() -> None:
        out["resp"] = post(url, rpc("tools/call", {"name": "slow", "arguments": {"dir": str(markers)}}), name="slow")

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    wait_for_file(markers / "started")
    proc.send_signal(signal.SIGTERM)
    caller.join(timeout=60)
    assert proc.wait(timeout=30) == 0
    assert "resp" in out, "the client got no reply"
    _check(parse_body(out["resp"])["result"], markers, tmp_path / "data")
