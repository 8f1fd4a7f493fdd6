"""A seeded JSON-RPC fuzzer over stdio and HTTP, every profile of this build.

``OPENFUNCTIONS_FUZZ_MESSAGES`` (default 6,000; the long run is
``OPENFUNCTIONS_FUZZ_MESSAGES=20000``) messages per run, split over
the targets (60 % stdio, 20 % stateless HTTP, 20 % HTTP with sessions: one
``initialize``, then every message carries the ``Mcp-Session-Id``, and about
one in twenty a wrong, stale or missing one); ``OPENFUNCTIONS_FUZZ_SEED`` picks the
sequence (default 19). Asserted: no server exits, every request with a valid
id is answered (within a bound), every stdout line and every HTTP body is a
well-formed JSON-RPC message with no Python exception name or traceback in
it, no HTTP 5xx, and a normal call afterwards gives the right answer and a
clean exit. Every profile ships, so one that fails to start fails the test.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time

import pytest

from openfunctions.servers._constants import PROFILES

from ..servers.conftest import serve_argv, server_env
from ._fuzz import check_reply, messages
from ._targets import HttpSessionTarget, HttpTarget, StdioTarget

pytestmark = pytest.mark.slow

TOTAL = int(os.environ.get("OPENFUNCTIONS_FUZZ_MESSAGES", "6000"))
SEED = int(os.environ.get("OPENFUNCTIONS_FUZZ_SEED", "19"))
BATCH = 200
BOUND = 60.0  # seconds a reply may take before it counts as a hang (a bound, not a timing claim)


def _fuzz_stdio(t: StdioTarget, tools: list[dict], count: int, rng: random.Random, sent: list[int]) -> None:
    expected: list[str] = []
    for i, (body, rid) in enumerate(messages(rng, count, tools)):
        t.send(body)
        sent[0] += 1
        if rid is not None:
            expected.append(rid)
        if i % BATCH == BATCH - 1:
            t.request(f"sentinel-{i}", "ping", timeout=BOUND)
    for rid in expected:
        reply = t.wait_for(rid, BOUND)
        if len(t.replies[json.dumps(rid)]) != 1:
            t.problems.append(f"{rid}: answered {len(t.replies[json.dumps(rid)])} times")
        assert reply["id"] == rid


def _header_safe(value: object) -> bool:
    # What httpx would refuse to send is not the server's input to judge.
    return isinstance(value, str) and value != "" and value.strip() == value and value.isprintable() and value.isascii()


def _fuzz_http(t: HttpTarget, tools: list[dict], count: int, rng: random.Random, sent: list[int],
               wrong_session: list[int]) -> None:
    for body, rid in messages(rng, count, tools, wrap_params=t.wrap):
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            parsed = None
        method = parsed.get("method") if isinstance(parsed, dict) else None
        params = parsed.get("params") if isinstance(parsed, dict) else None
        name = params.get("name") if isinstance(params, dict) else None
        headers = t.headers(method if _header_safe(method) else "ping", name if _header_safe(name) else None)
        if rng.random() < 0.03:
            headers["Content-Type"] = rng.choice(["text/plain", "application/jsonx", ""])
        if isinstance(t, HttpSessionTarget) and rng.random() < 0.05:
            # A wrong, stale-looking or missing session id: a 4xx, never another session's state, never a 5xx.
            wrong = rng.choice(["", "bogus", "0" * 32, t.session_id + "0", t.session_id.upper(), t.session_id[:-1]])
            headers.pop("Mcp-Session-Id", None)
            if wrong:
                headers["Mcp-Session-Id"] = wrong
            wrong_session[0] += 1
            rid = None  # no reply is owed to a request outside the session
        resp = t.client.post(t.url, content=body, headers=headers)
        sent[0] += 1
        if resp.status_code >= 500:
            t.problems.append(f"HTTP {resp.status_code} for {body[:200]!r}: {resp.text[:200]}")
        try:
            replies = t.messages(resp)
        except ValueError:
            t.problems.append(f"HTTP {resp.status_code}: body is not JSON: {resp.text[:200]!r}")
            continue
        for msg in replies:
            why = check_reply(msg)
            if why:
                t.problems.append(f"{why}: {json.dumps(msg)[:300]}")
        if rid is not None and resp.status_code == 200 and not any(m.get("id") == rid for m in replies):
            t.problems.append(f"no reply to {rid} in a 200: {resp.text[:200]!r}")


def _config(profile: str, tmp_path) -> list[str]:
    """What a profile needs to start: the gateway mounts our own tools profile (over stdio) as its upstream."""
    if profile not in ("gateway", "all"):
        return []
    upstreams = tmp_path / f"upstreams-{profile}.json"
    if not upstreams.exists():
        command = serve_argv("--data-dir", str(tmp_path / f"upstream-data-{profile}"))
        upstreams.write_text(json.dumps({"mcpServers": {"up": {"command": command[0], "args": command[1:],
                                                              "env": server_env()}}}))
    return ["--upstreams", str(upstreams)]


def _normal_call_works(target, tools: list[dict]) -> None:
    names = {t["name"] for t in tools}
    hasher = next((n for n in sorted(names) if n == "of_hash_text" or n.endswith("__of_hash_text")), None)
    if hasher is not None:
        params = {"name": hasher, "arguments": {"text": "abc"}}
        if isinstance(target, StdioTarget):
            result = target.request("final", "tools/call", params)["result"]
        else:
            resp = target.client.post(target.url, json={"jsonrpc": "2.0", "id": "final", "method": "tools/call",
                                                        "params": target.wrap(params)},
                                      headers=target.headers("tools/call", hasher))
            result = target.messages(resp)[-1]["result"]
        assert result["structuredContent"]["hex"].startswith("ba7816bf"), result
    else:
        again = target.request("final", "tools/list")["result"]["tools"] if isinstance(target, StdioTarget) else None
        assert again is None or {t["name"] for t in again} == names


def test_fuzzed_json_rpc_never_kills_hangs_or_leaks(tmp_path):
    # Every server is spawned before any is waited for: their start-ups overlap.
    targets: list = [StdioTarget(profile, tmp_path / f"stdio-{profile}", *_config(profile, tmp_path)) for profile in PROFILES]
    ready = []
    t0 = time.monotonic()
    try:
        targets += [kind(profile, tmp_path / f"{kind.__name__}-{profile}", *_config(profile, tmp_path))
                    for profile in PROFILES for kind in (HttpTarget, HttpSessionTarget)]
        for t in targets:
            ready.append((t, t.start()))
        assert ready, "no profile could start"
        started = time.monotonic() - t0
        stdio = [r for r in ready if isinstance(r[0], StdioTarget)]
        http = [r for r in ready if type(r[0]) is HttpTarget]
        sessions = [r for r in ready if type(r[0]) is HttpSessionTarget]
        per_stdio = int(TOTAL * 0.6) // max(1, len(stdio)) + 1
        per_http = int(TOTAL * 0.2) // max(1, len(http)) + 1
        per_session = int(TOTAL * 0.2) // max(1, len(sessions)) + 1
        counts = [[0] for _ in ready]
        wrong_session = [0]
        errors: list[BaseException] = []

        def run(i: int, t, tools) -> None:
            rng = random.Random(f"{SEED}-{t.profile}-{type(t).__name__}")
            try:
                if isinstance(t, StdioTarget):
                    _fuzz_stdio(t, tools, per_stdio, rng, counts[i])
                else:
                    n = per_session if isinstance(t, HttpSessionTarget) else per_http
                    _fuzz_http(t, tools, n, rng, counts[i], wrong_session)
                _normal_call_works(t, tools)
            except BaseException as exc:  # reported below, with the target's name
                tail = bytes(t.stderr[-1500:]).decode("utf-8", "replace")
                errors.append(RuntimeError(f"{t.profile}/{type(t).__name__} after {counts[i][0]} messages: {exc!r}; "
                                           f"server exit code {t.proc.poll()}; its stderr ends: {tail!r}"))

        threads = [threading.Thread(target=run, args=(i, t, tools)) for i, (t, tools) in enumerate(ready)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        sent = sum(c[0] for c in counts)
        by_kind: dict[str, int] = {}
        for (t, _), c in zip(ready, counts, strict=True):
            by_kind[type(t).__name__] = by_kind.get(type(t).__name__, 0) + c[0]
        print(f"\nfuzz: servers up in {started:.0f} s, fuzzing took {time.monotonic() - t0 - started:.0f} s")
        print(f"\nfuzz: by transport {by_kind}; {wrong_session[0]} session messages sent with a wrong or no session id")
        print(f"\nfuzz: seed {SEED}, {sent} messages to {len(ready)} targets "
              f"({', '.join(f'{t.profile}/{type(t).__name__[:-6].lower()}={c[0]}' for (t, _), c in zip(ready, counts, strict=True))})")
        assert not errors, errors
        problems = [f"{t.profile}/{type(t).__name__}: {p}" for t, _ in ready for p in t.problems]
        assert not problems, problems[:20]
        assert sent >= TOTAL
        if sessions:  # the sessions were fuzzed, each inside the one session it opened
            assert by_kind.get("HttpSessionTarget", 0) >= int(TOTAL * 0.2)
            assert all(t.initialized == 1 for t, _ in sessions)
        for t, _ in ready:
            assert t.proc.poll() is None, f"{t.profile}/{type(t).__name__} exited with {t.proc.returncode}"
    finally:
        # Closed side by side (each close waits for its server's own exit code).
        codes: dict[str, int] = {}

        def close(t) -> None:
            codes[f"{t.profile}/{type(t).__name__}"] = t.close()

        closers = [threading.Thread(target=close, args=(t,)) for t, _ in ready]
        for th in closers:
            th.start()
        for th in closers:
            th.join()
        for t in targets:
            if t.proc.poll() is None:
                t.proc.kill()
    assert all(c == 0 for c in codes.values()), codes
