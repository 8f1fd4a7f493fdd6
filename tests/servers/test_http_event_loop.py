"""``serve --loop`` and ``--http``: the event loop and HTTP parser a served process runs on.

``--http auto`` picks httptools when installed and falls back to h11 where it
is missing; ``--loop`` is asyncio unless uvloop is asked for. Naming a
missing one is a clear configuration error. Every combination serves a real
call (subprocesses on 127.0.0.1); the guards on both HTTP parsers are in
test_hostile_http.py.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from openfunctions.core.errors import ConfigurationError
from openfunctions.servers import _event_loop
from openfunctions.servers.cli import main

from .conftest import RawSession
from .test_http import parse_body, post, rpc

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
HAVE_HTTPTOOLS = importlib.util.find_spec("httptools") is not None


def _without(monkeypatch: pytest.MonkeyPatch, *missing: str) -> None:
    real = _event_loop._installed
    monkeypatch.setattr(_event_loop, "_installed", lambda name: name not in missing and real(name))


def test_auto_picks_httptools_when_installed_and_falls_back_when_not(monkeypatch):
    assert _event_loop.resolve_loop("asyncio") == "asyncio"
    assert _event_loop.resolve_http_parser("h11") == "h11"
    if HAVE_UVLOOP:
        assert _event_loop.resolve_loop("uvloop") == "uvloop"
    if HAVE_HTTPTOOLS:
        assert _event_loop.resolve_http_parser("auto") == "httptools"
    _without(monkeypatch, "uvloop", "httptools")
    assert _event_loop.resolve_http_parser("auto") == "h11"
    assert _event_loop.backend_options("asyncio") == {"use_uvloop": False}
    assert _event_loop.backend_options("uvloop") == {"use_uvloop": True}


def test_naming_a_missing_implementation_is_a_clear_error(monkeypatch, capsys, tmp_path):
    _without(monkeypatch, "uvloop", "httptools")
    with pytest.raises(ConfigurationError, match=r"--loop uvloop: the uvloop package is not installed.*--loop asyncio, the default"):
        _event_loop.resolve_loop("uvloop")
    with pytest.raises(ConfigurationError, match=r"--http httptools: the httptools package is not installed.*--http h11"):
        _event_loop.resolve_http_parser("httptools")
    with pytest.raises(ConfigurationError, match="--loop must be one of asyncio, uvloop, got 'tokio'"):
        _event_loop.resolve_loop("tokio")
    # Through the CLI: one line and exit 2, before anything starts.
    assert main(["serve", "--loop", "uvloop", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "--loop uvloop: the uvloop package is not installed" in err and "Traceback" not in err
    assert main(["serve", "--transport", "http", "--http", "httptools", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "--http httptools: the httptools package is not installed" in err and "Traceback" not in err


def _listening_line(stderr) -> dict:
    """The server's JSON log lines up to 'listening' (it is logged before the port opens)."""
    seen = {}
    for line in stderr:
        if line.startswith("{"):
            event = json.loads(line)
            seen[event["event"]] = event
            if event["event"] == "listening":
                return seen
    raise AssertionError(f"no 'listening' line; saw {sorted(seen)}")


@pytest.mark.slow
@pytest.mark.parametrize("parser", [pytest.param("httptools", marks=pytest.mark.skipif(not HAVE_HTTPTOOLS, reason="httptools missing")), "h11"])
@pytest.mark.parametrize("loop", [pytest.param("uvloop", marks=pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop missing")), "asyncio"])
def test_every_loop_and_parser_serves_a_call_over_http(http_server, loop, parser):
    url, proc = http_server("--stateless", "--loop", loop, "--http", parser, "--log-level", "info")
    events = _listening_line(proc.stderr)
    assert events["event_loop"]["loop"] == loop
    assert events["listening"]["http_parser"] == parser
    for text in ("abc", "x" * 100_000):  # a body in one read and in several
        reply = parse_body(post(url, rpc("tools/call", {"name": "of_hash_text", "arguments": {"text": text}}), name="of_hash_text"))
        assert reply["result"]["structuredContent"]["bytes"] == len(text)


@pytest.mark.slow
def test_the_defaults_are_asyncio_and_httptools_when_installed(http_server):
    _, proc = http_server("--stateless", "--log-level", "info")
    events = _listening_line(proc.stderr)
    assert events["event_loop"]["loop"] == "asyncio"
    assert events["listening"]["http_parser"] == ("httptools" if HAVE_HTTPTOOLS else "h11")


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop missing")
def test_stdio_serves_on_uvloop(tmp_path):
    s = RawSession("--loop", "uvloop", "--log-level", "info", data_dir=tmp_path / "data")
    try:
        rid = s.request("tools/call", rpc("tools/call", {"name": "of_hash_text", "arguments": {"text": "abc"}})["params"])
        assert s.response(rid)["result"]["structuredContent"]["hex"].startswith("ba7816bf")
    finally:
        s.close()
    assert b'"loop": "uvloop"' in bytes(s.stderr) or b"loop=uvloop" in bytes(s.stderr), bytes(s.stderr)[:500]
