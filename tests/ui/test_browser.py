"""The viewer and the chat page in headless Chromium, over real servers on 127.0.0.1, in one browser.

The data dir holds records of real runs (see ``_records.py``): an agent run with tool calls, a workflow run
SIGKILLed and blocked, a blocked work attempt, an MCP task over ``serve --transport http``, and chat turns
over ``chat --serve``. Hostile text (HTML/JS in model text, tool results, task results) must show as text:
no element made from it, no script run (``window.__pwned`` stays unset). Screenshots go to the test's tmp
dir; with ``OPENFUNCTIONS_UI_SCREENSHOTS=DIR`` they are copied there too (docs/ui/ holds a set).

Chromium is Debian's ``chromium`` package; missing, the tests are skipped (CI sets
``OPENFUNCTIONS_REQUIRE_INTEROP=1``, which makes that a failure).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from openfunctions.agents import read_runs
from tests.chat._cdp import Browser
from tests.chat.test_page import chromium_or_skip

from ._records import HOSTILE, ROOT, SCRIPT, agent_run, work_attempt_blocked, workflow_killed_and_blocked

pytestmark = pytest.mark.slow

CHAT_SCRIPT = [
    "Hello from the fixture.",
    {"tool": "add", "arguments": {"a": 2, "b": 3}},
    f"**Sum** is `5`.\n\n```\ncode <b>x</b>\n```\n\n- item {HOSTILE}\n- [docs](https://example.com/x)\n\n{SCRIPT}",
    {"tool": "nap", "arguments": {}},
]


@dataclass
class World:
    tmp: Path
    data: Path
    run_id: str
    attempt: str
    operation: str
    task_id: str
    conversation: str
    mcp: Any
    ui_url: str
    chat_url: str
    browser: Browser
    shots: list[Path]


def _served(argv: list[str], marker: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith(marker):
            return proc, line.split()[3]
    proc.wait(timeout=30)
    raise AssertionError(f"{argv[3]} did not start (exit {proc.returncode})")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    executable = chromium_or_skip()
    from tests.servers.test_tasks import Served, _create

    tmp = tmp_path_factory.mktemp("ui")
    data = tmp / "data"
    run_id = anyio.run(agent_run, data)
    workflow_killed_and_blocked(tmp, data)
    attempt, operation = anyio.run(work_attempt_blocked, tmp)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    procs: list[subprocess.Popen[str]] = []
    mcp = Served(data)
    browser = None
    try:
        client = mcp.start()
        task_id = _create(client, "task_quick", {"text": HOSTILE})["taskId"]
        client.until(task_id, {"completed"})
        big = _create(client, "task_big", {"size": 300_000})["taskId"]  # past the inline size: kept as an artifact
        client.until(big, {"completed"})
        script = tmp / "replies.json"
        script.write_text(json.dumps(CHAT_SCRIPT))
        chat, chat_url = _served([sys.executable, "-m", "openfunctions.servers", "chat", "--serve", "--port", "0",
                                  "--provider", "scripted", "--script", str(script), "--module", "tests.ui.chat_tools",
                                  "--data-dir", str(data)], "chat served at ", env)
        procs.append(chat)
        first = httpx.post(chat_url + "chat", json={"message": "hi"}, timeout=60)
        assert first.status_code == 200, first.text
        ui, ui_url = _served([sys.executable, "-m", "openfunctions.servers", "ui", "--port", "0", "--data-dir", str(data),
                              "--allow-resolve"],
                             "ui served at ", env)
        procs.append(ui)
        browser = Browser(executable, tmp / "profile")
        yield World(tmp, data, run_id, attempt, operation, task_id, first.json()["conversation_id"], client, ui_url,
                    chat_url, browser, [])
    finally:
        if browser is not None:
            browser.close()
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
            if p.stderr:
                p.stderr.close()
        mcp.stop()


class Page:
    """One tab of the shared browser."""

    def __init__(self, world: World) -> None:
        self.world, self.b = world, world.browser
        target = self.b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.b.send(f"{domain}.enable", session=self.session)
        self.b.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1,
                                                           "mobile": False}, session=self.session)

    def go(self, url: str) -> None:
        self.b.send("Page.navigate", {"url": url}, session=self.session)

    def view(self, url: str) -> None:
        """Open a viewer route and wait until the page has drawn it (a hash change renders asynchronously)."""
        self.js("document.body && delete document.body.dataset.rendered")
        self.go(url)
        self.until("!!(document.body && document.body.dataset.rendered)", f"{url} to render")

    def js(self, expression: str) -> Any:
        out = self.b.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                          session=self.session)
        if "exceptionDetails" in out:
            raise AssertionError(f"page script failed: {out['exceptionDetails']}")
        return out["result"].get("value")

    def until(self, expression: str, what: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:  # an exception (e.g. the page still loading) counts as "not yet"
            value = self.js(f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()")
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def shot(self, name: str) -> None:
        png = base64.b64decode(self.b.send("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        path = self.world.tmp / f"{name}.png"
        path.write_bytes(png)
        self.world.shots.append(path)
        keep = os.environ.get("OPENFUNCTIONS_UI_SCREENSHOTS")
        if keep:
            shutil.copy(path, Path(keep) / path.name)

    def safe(self) -> None:
        """Hostile text stayed text: no script ran, no element came from it."""
        assert self.js("window.__pwned === undefined") is True
        assert self.js("document.querySelectorAll('img, iframe, object').length") == 0
        assert self.js("document.scripts.length") == 1  # the page's own
        assert self.js("[...document.querySelectorAll('*')].some(e => [...e.attributes].some(a => a.name.startsWith('on')))") is False


def console_errors(browser: Browser) -> list[dict[str, Any]]:
    return [e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"
            or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
            or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]


def test_the_viewer_shows_every_stream_a_run_in_detail_and_live_receipts(world: World) -> None:
    page = Page(world)
    run = read_runs(world.data)[world.run_id]
    # Overview: what needs a person first, each with its exact resolve command; every journal verifies.
    page.view(world.ui_url)
    page.until("document.querySelectorAll('#attention .attention').length >= 2", "the attention list")
    items = page.js("[...document.querySelectorAll('#attention .attention')].map(e => ({kind: e.dataset.kind, "
                    "text: e.textContent, cmds: [...e.querySelectorAll('code')].map(c => c.textContent)}))")
    by_kind = {i["kind"]: i for i in items}
    assert "order-7" in by_kind["workflow_step"]["text"]
    assert by_kind["workflow_step"]["cmds"][1] == f"openfunctions-mcp workflows resolve order-7 1 --not-applied --data-dir {world.data}"
    assert by_kind["work_operation"]["cmds"][0].startswith(f"openfunctions-mcp work resolve {world.operation} --as applied")
    verify = page.js("[...document.querySelectorAll('table[data-kind=streams] tbody tr')].map(r => [r.dataset.id, "
                     "r.lastChild.textContent])")
    kinds = {p.split("/")[0] for p, _ in verify}
    assert {"journal", "workflows", "work", "chat"} <= kinds and all(v == "ok" for _, v in verify), verify
    assert page.until("document.getElementById('live').textContent === 'live'", "the live stream")
    page.shot("ui-overview")

    # One agent run: the tree's tool calls are the run record's receipts; hostile model text is text.
    page.view(f"{world.ui_url}#/agent-runs/{world.run_id}")
    [child] = [r for r in read_runs(world.data).values() if r.started.get("parent_run_id") == world.run_id]
    page.until("document.querySelectorAll('.tree .node[data-type=receipt]').length === 4", "the run's tree")
    # in document order: the two lookups, the delegation, and inside it the child run's own call
    assert page.js("[...document.querySelectorAll('.tree .node[data-type=receipt]')].map(e => e.dataset.id)") \
        == run.finished["receipts"] + child.finished["receipts"]
    assert page.js("[...document.querySelectorAll('.tree .node[data-type=run]')].map(e => e.dataset.id)") \
        == [world.run_id, child.run_id]
    assert page.js("document.querySelectorAll('.tree .node[data-type=receipt] .s-succeeded').length") == 4
    assert page.js("document.querySelector('pre.answer').textContent") == f"Found it: {HOSTILE} {SCRIPT}"
    assert page.js("document.querySelectorAll('.timeline li').length") == 12
    page.safe()
    page.shot("ui-agent-run")

    # The killed workflow run: step 1 is uncertain, with both resolve commands.
    page.view(f"{world.ui_url}#/workflow-runs/order-7")
    row = page.until("(r => r && {status: r.children[2].textContent, cmds: [...r.querySelectorAll('code')]"
                     ".map(c => c.textContent)})(document.querySelector('table[data-kind=steps] tr[data-id=\"1\"]'))",
                     "the workflow's steps")
    assert row["status"] == "started" and "--applied --result" in row["cmds"][0]

    # The blocked work attempt: its write is unknown.
    page.view(f"{world.ui_url}#/attempts/{world.attempt}")
    op = page.until(f"(r => r && r.children[3].textContent)(document.querySelector('tr[data-id=\"{world.operation}\"]'))",
                    "the attempt's operations")
    assert op == "unknown"

    # The MCP task, its hostile result as text; the chat conversation.
    page.view(f"{world.ui_url}#/tasks")
    task_text = page.until(f"(r => r && r.textContent)(document.querySelector('tr[data-id=\"{world.task_id}\"]'))",
                           "the task row")
    assert "<img src=x onerror=" in task_text and "completed" in task_text  # JSON-escaped quotes, literal tag
    page.safe()
    # the large result: named in the list, its first 16 KiB shown through the artifact store's verified read
    page.until("!!document.querySelector('table[data-kind=tasks] a[href^=\"#/artifacts/\"]')", "the artifact link")
    page.js("document.querySelector('table[data-kind=tasks] a[href^=\"#/artifacts/\"]').click()")
    shown = page.until("(p => p && p.textContent)(document.querySelector('pre.artifact'))", "the artifact preview")
    assert shown.startswith('{"_meta":{"dev.openfunctions/receipt"') and shown.endswith("x" * 1000) and len(shown) == 16 * 1024
    assert "the first 16384 bytes of" in page.js("document.querySelector('main').textContent")
    page.view(f"{world.ui_url}#/conversations")
    page.until(f"!!document.querySelector('tr[data-id=\"{world.conversation}\"]')", "the conversation row")

    # Filters: the two agents' three lookups.
    page.view(f"{world.ui_url}#/receipts?tool=lookup")
    page.until("document.querySelectorAll('table[data-kind=receipts] tbody tr').length === 3", "the filtered receipts")

    # Live: a call made now shows up in the open list without a reload.
    page.view(f"{world.ui_url}#/receipts")
    before = page.until("document.querySelectorAll('table[data-kind=receipts] tbody tr').length", "the receipts")
    rendered = page.js("document.body.dataset.rendered")
    reply = world.mcp.result("tools/call", {"name": "task_quick", "arguments": {"text": "live"}}, tasks=False)
    new_id = reply["_meta"]["dev.openfunctions/receipt"]["receipt_id"]
    page.until(f"!!document.querySelector('tr[data-id=\"{new_id}\"]')", "the new receipt to appear live", timeout=30)
    assert page.js("document.body.dataset.rendered") != rendered  # re-rendered by the live update, not navigated
    assert page.js("document.querySelectorAll('table[data-kind=receipts] tbody tr').length") == before + 1
    page.shot("ui-receipts")

    # Resolve from the page (served with --allow-resolve): the same records the resolve commands write.
    page.view(world.ui_url)
    page.until("document.querySelectorAll('#attention form.resolve').length === 2", "the resolve forms")

    def resolve(kind: str, fields: dict[str, str]) -> str:
        sets = "; ".join(f"f.elements[{k!r}].value = {json.dumps(v)}" for k, v in fields.items())
        page.js(f"(f => {{ {sets}; f.querySelector('button').click(); }})"
                f"(document.querySelector('.attention[data-kind={kind}] form.resolve'))")
        return page.until(f"(o => o && o.textContent !== 'recording…' && o.textContent)(document.querySelector("
                          f"'.attention[data-kind={kind}] [data-role=outcome]'))", f"the {kind} resolution")

    assert resolve("work_operation", {"verdict": "not-applied", "reason": "", "by": "ops"}).startswith(
        "--reason must say what you checked")  # the work resolve code's own refusal, shown
    page.shot("ui-resolve")
    assert resolve("workflow_step", {"verdict": "applied", "result": '{"charged": 30}', "by": "ops"}) == "recorded"
    from openfunctions.workflows import WorkflowRuns

    assert WorkflowRuns(world.data).show("order-7").resolutions == [{"step": "1", "applied": True, "by": "ops via ui"}]
    page.until("!document.querySelector('.attention[data-kind=workflow_step]')", "the resolved step to leave the list")
    assert resolve("work_operation", {"verdict": "not-applied", "reason": "checked: nothing appended", "by": "ops"}) \
        == "recorded"
    listed = subprocess.run([sys.executable, "-m", "openfunctions.servers", "work", "list-uncertain", "--json",
                             "--data-dir", str(world.data)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    [row] = json.loads(listed.stdout)
    assert row["resolutionPending"] == {"as": "not_applied", "reason": "checked: nothing appended", "by": "ops via ui",
                                        "at": row["resolutionPending"]["at"]}
    page.until("(e => e && e.textContent.includes('resolved as not_applied'))"
               "(document.querySelector('.attention[data-kind=work_operation]'))", "the pending resolution")
    # the one error logged is Chromium's note on the refusal provoked above (a 400 answer to /api/resolve)
    errors = console_errors(world.browser)
    assert [(e["params"]["entry"]["source"], e["params"]["entry"].get("url", "").endswith("/api/resolve"))
            for e in errors] == [("network", True)], errors
    world.browser.events.clear()


def test_the_chat_page_markdown_stop_errors_and_conversations(world: World) -> None:
    page = Page(world)
    page.go(f"{world.chat_url}#viewer={world.ui_url}")
    page.until("document.getElementById('status').textContent.includes('scripted/scripted')", "the health line")
    assert "Start a conversation" in page.js("document.getElementById('empty').textContent")
    assert "5 tools (add, nap, memory_save_fact" in page.js("document.getElementById('empty').textContent")
    # the input sits at the bottom of the window, whatever the transcript's length
    assert page.js("innerHeight - document.getElementById('form').getBoundingClientRect().bottom") == 0

    def say(text: str) -> None:
        page.js("document.getElementById('message').focus()")
        page.b.send("Input.insertText", {"text": text}, session=page.session)
        for kind in ("keyDown", "keyUp"):
            page.b.send("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13,
                                                   "text": "\r" if kind == "keyDown" else ""}, session=page.session)

    say("What is 2 + 3?")
    page.until("!!document.querySelector('.note[data-run-id]')", "the first turn")
    md = page.js("""(b => ({strong: b.querySelector('strong').textContent, code: b.querySelector('p code').textContent,
        pre: b.querySelector('pre code').textContent, items: [...b.querySelectorAll('li')].map(l => l.textContent),
        href: b.querySelector('a').href, rel: b.querySelector('a').rel, text: b.textContent}))(document.querySelector('.msg.bot'))""")
    assert md["strong"] == "Sum" and md["code"] == "5" and md["pre"] == "code <b>x</b>"
    assert md["items"] == [f"item {HOSTILE}", "docs"] and md["href"] == "https://example.com/x" and "noopener" in md["rel"]
    assert SCRIPT in md["text"]
    page.safe()
    receipt = page.js("document.querySelector('.tool a.receipt').href")
    assert receipt.startswith(f"{world.ui_url}#/receipts/rcpt_")
    page.shot("chat-markdown")

    # Stop: the running turn is cancelled, and the server records its run so.
    page.js("document.getElementById('reset').click()")
    assert page.js("!!document.getElementById('empty')") is True
    say("Take a nap")
    page.until("[...document.querySelectorAll('.tool')].some(e => e.textContent.startsWith('tool nap({}) …'))", "the nap call")
    assert page.js("document.getElementById('stop').hidden") is False
    page.js("document.getElementById('stop').click()")
    page.until("!!document.querySelector('.failed[data-status=stopped]')", "the stopped turn")
    assert page.js("[...document.querySelectorAll('.tool.error')].map(e => e.textContent)") == [
        "tool nap({}) → no result (the turn ended first)"]
    deadline = time.monotonic() + 30
    while not any(r.status == "cancelled" for r in read_runs(world.data).values()):
        assert time.monotonic() < deadline, "the stopped turn's run was never recorded cancelled"
        time.sleep(0.1)

    # A failed turn (the script has run out) is an error with its reason, not a grey line.
    say("And now?")
    failed = page.until("(e => e && {text: e.textContent, color: getComputedStyle(e).backgroundColor})"
                        "(document.querySelector('.failed[data-status=failed]'))", "the failed turn")
    assert "Turn failed" in failed["text"] and "script" in failed["text"] and failed["color"] == "rgb(253, 236, 234)"
    page.shot("chat-stop-and-failure")

    # Two conversations of this browser in the list; the first one's transcript comes back.
    ids = page.js("[...document.querySelectorAll('#conversations li')].map(l => l.dataset.conversationId)")
    assert len(ids) == 2 and all(i and i.startswith("conv_") for i in ids) and ids[0] != ids[1]
    page.js("document.querySelectorAll('#conversations li')[1].click()")
    assert page.js("document.querySelector('.msg.bot strong').textContent") == "Sum"
    page.go(f"{world.chat_url}#viewer={world.ui_url}")  # and after a reload
    page.until("document.querySelectorAll('#conversations li').length === 2", "the list after a reload")
    page.shot("chat-conversations")

    # The receipt link opens the chat's call in the viewer.
    page.go(receipt)
    page.until(f"document.querySelector('h2') && document.querySelector('h2').textContent.includes('{receipt.rsplit('/', 1)[1]}')",
               "the receipt in the viewer")
    assert console_errors(world.browser) == []


def test_with_a_token_the_page_sends_it_from_the_fragment(world: World) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "UI_TEST_TOKEN": "viewer-token-123"}
    proc, url = _served([sys.executable, "-m", "openfunctions.servers", "ui", "--port", "0", "--data-dir",
                         str(world.data), "--auth-token-env", "UI_TEST_TOKEN"], "ui served at ", env)
    try:
        assert httpx.get(url + "api/summary", timeout=30).status_code == 401
        page = Page(world)
        page.go(url + "#token=viewer-token-123")
        page.until("document.querySelectorAll('.cards .card').length === 6", "the overview with the token")
        assert page.until("document.getElementById('live').textContent === 'live'", "the live stream with the token")
        assert page.js("location.hash") == "#/"  # the token left the address bar (kept for this tab only)
        page.view(url + "#/receipts")
        page.until("document.querySelectorAll('table[data-kind=receipts] tbody tr').length > 0", "receipts")
        assert console_errors(world.browser) == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()
