"""The served chat page in headless Chromium: type a message, see the streamed reply and the tool call's receipt.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it). Missing, the test is skipped on a
developer's machine and FAILS where ``OPENFUNCTIONS_REQUIRE_INTEROP=1`` (CI).
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ._cdp import Browser, find_chromium

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
MESSAGE = "What is 2 + 3?"
REPLY = "The sum is 5, computed by the add tool."


def chromium_or_skip() -> str:
    path = find_chromium()
    if path is None:
        why = "chromium is not installed (Debian: apt-get install -y chromium)"
        if os.environ.get("OPENFUNCTIONS_REQUIRE_INTEROP", "").strip() not in ("", "0", "false", "no"):
            pytest.fail(f"{why}, and OPENFUNCTIONS_REQUIRE_INTEROP is set", pytrace=False)
        pytest.skip(why)
    return path


def serve_chat(tmp_path: Path, token: str | None) -> tuple[subprocess.Popen[str], str]:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"tool": "add", "arguments": {"a": 2, "b": 3}}, REPLY]))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    auth = []
    if token:
        env["CHAT_TEST_TOKEN"] = token
        auth = ["--auth-token-env", "CHAT_TEST_TOKEN"]
    proc = subprocess.Popen([sys.executable, "-m", "openfunctions.servers", "chat", "--serve", "--port", "0",
                             "--provider", "scripted", "--script", str(script), "--module", "tests.chat.fixture_tools",
                             "--data-dir", str(tmp_path / "data"), *auth],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("chat served at "):
            return proc, line.split()[3]
    proc.wait(timeout=30)
    raise AssertionError(f"the chat server did not start (exit {proc.returncode})")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def evaluate(browser: Browser, session: str, expression: str) -> Any:
    out = browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    if "exceptionDetails" in out:
        raise AssertionError(f"page script failed: {out['exceptionDetails']}")
    return out["result"].get("value")


@pytest.mark.parametrize("token", [None, "page-token-123"], ids=["loopback", "bearer"])
def test_the_page_streams_a_reply_and_shows_the_tool_receipt(tmp_path: Path, token: str | None) -> None:
    """With a token, the page is opened as /#token=... and sends it on every call (the fragment never reaches the server)."""
    executable = chromium_or_skip()
    server, url = serve_chat(tmp_path, token)
    if token:
        url += f"#token={token}"
    browser = Browser(executable, tmp_path / "profile")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Page.navigate", {"url": url}, session=session)
        browser.wait_event("Page.loadEventFired")
        # The header shows the health the page fetched on load.
        deadline = time.monotonic() + 30
        while "scripted/scripted" not in (evaluate(browser, session, "document.getElementById('status').textContent") or ""):
            assert time.monotonic() < deadline, "the page never showed the server's health"
            time.sleep(0.1)
        # Type the message and press Enter, as a person would.
        evaluate(browser, session, "document.getElementById('message').focus()")
        browser.send("Input.insertText", {"text": MESSAGE}, session=session)
        for kind in ("keyDown", "keyUp"):
            browser.send("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter",
                                                    "windowsVirtualKeyCode": 13, "text": "\r" if kind == "keyDown" else ""},
                         session=session)
        deadline = time.monotonic() + 60
        while not evaluate(browser, session, "!!document.querySelector('.note[data-run-id]')"):
            assert time.monotonic() < deadline, "the streamed reply never finished"
            time.sleep(0.1)
        dom = evaluate(browser, session, """JSON.stringify({
            user: [...document.querySelectorAll('.msg.user')].map(e => e.textContent),
            bot: [...document.querySelectorAll('.msg.bot')].map(e => e.textContent),
            tools: [...document.querySelectorAll('.tool')].map(e => ({text: e.textContent, receipt: e.dataset.receipt})),
            run: document.querySelector('.note[data-run-id]').dataset.runId,
            input: document.getElementById('message').value})""")
        shot = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"])
    finally:
        browser.close()
        server.terminate()
        server.wait(timeout=30)
    state = json.loads(dom)
    assert state["user"] == [MESSAGE] and state["bot"] == [REPLY] and state["input"] == ""
    [tool] = state["tools"]
    assert tool["receipt"].startswith("rcpt_") and tool["receipt"] in tool["text"] and tool["text"].startswith('tool add({"a":2,"b":3}) → succeeded')
    assert state["run"].startswith("run_")
    # The receipt the page shows is the one the server journaled for the add call.
    from openfunctions.agents import read_runs

    run = read_runs(tmp_path / "data")[state["run"]]
    assert run.status == "completed" and run.finished["receipts"] == [tool["receipt"]]
    # The screenshot: a real PNG of the window, with something drawn on it.
    png = tmp_path / "chat.png"
    png.write_bytes(shot)
    width, height = png_size(shot)
    assert width == 1000 and height > 400 and len(shot) > 10_000, (width, height, len(shot))
    if os.environ.get("OPENFUNCTIONS_CHAT_SCREENSHOT"):  # keep a copy to look at
        Path(os.environ["OPENFUNCTIONS_CHAT_SCREENSHOT"]).write_bytes(shot)
    # No console errors, no uncaught exceptions, no failed loads.
    errors = [e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"
              or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
              or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert errors == [], errors
