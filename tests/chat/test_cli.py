"""``openfunctions-mcp chat``: help, the no-provider message, the terminal loop and --serve, as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from openfunctions.agents import read_runs

REPO = Path(__file__).resolve().parents[2]
KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY",
        "OPENFUNCTIONS_PROVIDER", "OPENFUNCTIONS_MODEL")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in KEYS}
    out["PYTHONPATH"] = str(REPO) + os.pathsep + out.get("PYTHONPATH", "")
    return out


def cli(*args: str, input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", *args], input=input, capture_output=True,
                          text=True, timeout=120, env=env(), cwd=cwd or REPO)


def test_chat_help_says_what_to_set() -> None:
    proc = cli("chat", "--help")
    assert proc.returncode == 0, proc.stderr
    for words in ("--serve", "--port", "--provider", "--model", "--module", "--prompt", "--data-dir", "--script",
                  "OPENAI_API_KEY", "--provider scripted --script"):
        assert words in proc.stdout, words
    top = cli("--help")
    assert top.returncode == 0 and "chat with a model that uses your tools" in top.stdout


def test_the_top_level_help_does_not_import_the_chat_package() -> None:
    code = ("import sys\nfrom openfunctions.servers import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('openfunctions.chat')), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env())
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


def test_no_provider_configured_says_which_variables_to_set_and_offers_the_offline_demo(tmp_path: Path) -> None:
    proc = cli("chat", "--data-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "no model provider configured: set one of ANTHROPIC_API_KEY, OPENAI_API_KEY" in proc.stderr
    assert "--provider scripted --script" in proc.stderr
    proc = cli("chat", "--provider", "scripted", "--data-dir", str(tmp_path))
    assert proc.returncode == 2 and "--provider scripted needs --script FILE" in proc.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = cli("chat", "--provider", "scripted", "--script", str(bad), "--data-dir", str(tmp_path))
    assert proc.returncode == 2 and "bad.json' is not JSON" in proc.stderr


def test_max_conversations_is_checked_and_named(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text('["hi"]')
    proc = cli("chat", "--provider", "scripted", "--script", str(script), "--data-dir", str(tmp_path), "--serve",
               "--max-conversations", "0")
    assert proc.returncode == 2 and "max_conversations: Input should be greater than or equal to 1" in proc.stderr
    assert "--max-conversations" in cli("chat", "--help").stdout


def test_context_ceiling_is_checked_and_named(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text('["hi"]')
    proc = cli("chat", "--provider", "scripted", "--script", str(script), "--data-dir", str(tmp_path),
               "--context-ceiling", "0")
    assert proc.returncode == 2 and "context_ceiling: Input should be greater than or equal to 1" in proc.stderr
    assert "--context-ceiling" in cli("chat", "--help").stdout


def test_the_interactive_loop_over_stdin(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([
        {"tool": "add", "arguments": {"a": 20, "b": 22}},
        "20 + 22 = 42.",
        {"tool": "memory_save_fact", "arguments": {"text": "The answer is 42"}},
        "Saved.",
        "I remember: 42.",
    ]))
    data = tmp_path / "data"
    proc = cli("chat", "--provider", "scripted", "--script", str(script), "--module", "tests.chat.fixture_tools",
               "--data-dir", str(data),
               input="what is 20 + 22?\nremember that the answer is 42\n/help\n/reset\nwhat is the answer?\n/exit\nnever read\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "chat on scripted/scripted, 5 tool(s), memory on" in out
    assert '  [tool] add({"a":20,"b":22})' in out and "  [tool] add -> succeeded (rcpt_" in out
    assert "bot> 20 + 22 = 42." in out and "bot> Saved." in out and "/reset starts a new conversation" in out
    assert "(new conversation chat_" in out and "bot> I remember: 42." in out
    runs = read_runs(data)
    assert sorted(r.status for r in runs.values()) == ["completed"] * 3


def test_interactive_loop_tells_a_failed_turn_and_continues(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["only one"]))
    proc = cli("chat", "--provider", "scripted", "--script", str(script), "--no-memory", "--data-dir", str(tmp_path),
               input="one\ntwo\n")
    assert proc.returncode == 0, proc.stderr
    assert "bot> only one" in proc.stdout
    assert "(turn failed: the scripted adapter has no reply left" in proc.stdout


@pytest.mark.slow
def test_serve_from_the_command_line(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["Served hello."]))
    proc = subprocess.Popen([sys.executable, "-m", "openfunctions.servers", "chat", "--serve", "--port", "0",
                             "--provider", "scripted", "--script", str(script), "--data-dir", str(tmp_path)],
                            stderr=subprocess.PIPE, text=True, env=env(), cwd=REPO)
    try:
        assert proc.stderr is not None
        url = None
        for line in proc.stderr:
            if line.startswith("chat served at "):
                url = line.split()[3]
                break
        assert url is not None and url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/health").json()["status"] == "ok"
            assert client.post("/chat", json={"message": "hi"}).json()["text"] == "Served hello."
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0



def _serve(tmp_path: Path, script: list[str], log: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """``chat --serve`` as a real process; returns it and its URL (read from its stderr, kept in ``log``)."""
    (tmp_path / "replies.json").write_text(json.dumps(script))
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "openfunctions.servers", "chat", "--serve", "--port", "0",
                                 "--provider", "scripted", "--script", str(tmp_path / "replies.json"),
                                 "--data-dir", str(tmp_path / "data"), *extra],
                                stderr=err, text=True, env=env(), cwd=REPO)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # a bounded wait for its "served at" line
        for line in log.read_text().splitlines():
            if line.startswith("chat served at "):
                return proc, line.split()[3]
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=30)
    raise AssertionError(f"chat --serve did not start: {log.read_text()[-2000:]}")


async def _thread(data: Path, thread: str) -> list[tuple[str, str]]:
    from openfunctions.memory import Memory
    from openfunctions.store import open_local_store

    memory = Memory(await open_local_store("memory", data))
    try:
        page = await memory.get_thread(thread, limit=50)
        return [(m.role, m.content) for m in reversed(page.messages)]
    finally:
        await memory.aclose()


@pytest.mark.slow
def test_a_conversation_survives_a_sigkill_of_the_server(tmp_path: Path) -> None:
    proc, url = _serve(tmp_path, ["Hello Ada.", "Hi.", "Noted."], tmp_path / "first.log")
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            r = client.post("/chat", json={"message": "I am Ada"})
            ada, thread = r.headers["x-conversation-id"], r.json()["metadata"]["thread_id"]
            other = client.post("/chat", json={"message": "someone else"}).headers["x-conversation-id"]
            r = client.post("/chat", json={"message": "I like teal"}, headers={"x-conversation-id": ada})
            assert r.json()["text"] == "Noted." and client.get("/health").json()["conversations_durable"] is True
    finally:
        proc.kill()  # SIGKILL: nothing is flushed or closed on the way out
        proc.wait(timeout=30)
    # Restarted with room for one conversation: the most recently used (Ada's) is kept, the other forgotten.
    proc, url = _serve(tmp_path, ["You are Ada; you like teal."], tmp_path / "second.log", "--max-conversations", "1")
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            r = client.post("/chat", json={"message": "someone else again", "conversation_id": other})
            assert r.status_code == 404 and r.json()["error"]["code"] == "chat_conversation_not_found"
            r = client.post("/chat", json={"message": "who am I?", "conversation_id": ada})
            assert r.status_code == 200, r.text
            assert r.json()["text"] == "You are Ada; you like teal." and r.json()["metadata"]["thread_id"] == thread
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    # The turn after the restart was taken in Ada's thread, after the two before the kill (it was shown them).
    assert anyio.run(_thread, tmp_path / "data", thread) == [
        ("user", "I am Ada"), ("assistant", "Hello Ada."), ("user", "I like teal"), ("assistant", "Noted."),
        ("user", "who am I?"), ("assistant", "You are Ada; you like teal.")]
