"""Catalog steps as real tools: subprocesses, timeouts, cancellation, atomic writes, oracles."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.artifacts import ArtifactStore
from openfunctions.core import ToolExecutionContext, ToolRegistry
from openfunctions.work._catalog import Catalog
from openfunctions.work._steps import create_step_tools, prepare_reconciliation
from tests._harness import alive

pytestmark = pytest.mark.anyio

PY = sys.executable

CATALOG = f"""
version = 1
workspace = "ws"

[steps.exit]
kind = "command"
description = "print to both streams and exit with a code"
argv = ["{PY}", "-c", "import sys; print('to out'); print('to err', file=sys.stderr); sys.exit(int(sys.argv[1]))", "{{code}}"]
effect = "read"
[steps.exit.params.code]
type = "integer"
minimum = 0
maximum = 255

[steps.args]
kind = "command"
description = "show argv"
argv = ["{PY}", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", "--", "{{word}}"]
effect = "read"
[steps.args.params.word]
type = "string"
pattern = "[^\\\\n]+"

[steps.env]
kind = "command"
description = "show env"
argv = ["{PY}", "-c", "import os, json; print(json.dumps(dict(os.environ)))"]
env = ["PATH", "OF_ALLOWED"]
env_set = {{ OF_FIXED = "fixed" }}
effect = "read"

[steps.big]
kind = "command"
description = "lots of output"
argv = ["{PY}", "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)) * 400)"]
effect = "read"

[steps.hang]
kind = "command"
description = "leave a background child and hang"
argv = ["sh", "-c", "sleep 600 & echo $! > bg.pid; echo $$ > main.pid; sleep 600"]
env = ["PATH"]
timeout_s = 0.5

[steps.pwd]
kind = "command"
description = "print the working directory"
argv = ["{PY}", "-c", "import os; print(os.getcwd())"]
cwd = "./src/"
effect = "read"

[steps.missing]
kind = "command"
description = "no such program"
argv = ["/nonexistent/program-xyz"]

[steps.write_src]
kind = "write_file"
description = "write under src"
paths = ["src/**"]
max_bytes = 1000

[steps.read_src]
kind = "read_file"
description = "read under src"
paths = ["src/**"]

[steps.snap]
kind = "fingerprint"
description = "fingerprint src"
paths = ["src/**"]

[steps.touch]
kind = "command"
description = "append to src/log.txt"
argv = ["sh", "-c", "echo x >> src/log.txt"]
env = ["PATH"]
effect = "write"
readback = {{ paths = ["src/log.txt"], changes_on_apply = true }}

[steps.fmt]
kind = "command"
description = "idempotent rewrite"
argv = ["sh", "-c", "echo formatted > src/a.py"]
env = ["PATH"]
effect = "write"
idempotent = true
readback = {{ paths = ["src/**"] }}
"""


class Env:
    def __init__(self, tmp: Path, capture_limit: int = 8 * 1024 * 1024) -> None:
        self.tmp = tmp
        self.ws = tmp / "ws"
        (self.ws / "src").mkdir(parents=True)
        (tmp / "c.toml").write_text(CATALOG)
        self.catalog = Catalog.load(tmp / "c.toml")
        self.store = ArtifactStore(tmp / "artifacts")
        self.registry = ToolRegistry(create_step_tools(self.catalog, store=self.store, capture_limit=capture_limit))
        self.progress: list[tuple[float, float | None, str | None]] = []

        async def progress(p: float, t: float | None, m: str | None) -> None:
            self.progress.append((p, t, m))

        self.ctx = ToolExecutionContext(
            principal="agent", metadata={"artifact_scope": "att_1", "granted_paths": ["src/**"]}, progress=progress
        )

    async def run(self, step: str, params: dict[str, Any] | None = None, ctx: ToolExecutionContext | None = None):
        return await self.registry.execute_detailed(f"of_step.{step}", params or {}, ctx or self.ctx)

    async def read_artifact(self, artifact_id: str) -> bytes:
        out, off = b"", 0
        while True:
            ch = await self.store.read(artifact_id, offset=off)
            out += ch.data
            off += len(ch.data)
            if ch.eof:
                return out


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


async def _dies(pid: int) -> bool:
    """Whether ``pid`` is gone within 10 s (SIGKILL delivery to an unwaited process is asynchronous)."""
    with anyio.move_on_after(10):
        while alive(pid):
            await anyio.sleep(0.01)
    return not alive(pid)


def _pid(path: Path) -> int | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.endswith("\n") else None


async def test_command_exit_codes_and_streams_to_artifacts(env: Env) -> None:
    for code in (0, 3):
        r = await env.run("exit", {"code": code})
        assert r.ok, r.error
        ev = r.value
        assert ev["exit_code"] == code and ev["passed"] is (code == 0) and not ev["timed_out"]
        assert r.receipt.outcome == "succeeded" and r.receipt.certainty == "known"
        out = await env.read_artifact(ev["stdout"]["artifact_id"])
        assert out == b"to out\n"
        assert ev["stdout"]["sha256"] == "sha256:" + hashlib.sha256(out).hexdigest()
        assert (await env.read_artifact(ev["stderr"]["artifact_id"])) == b"to err\n"
        info = await env.store.stat(ev["stdout"]["artifact_id"])
        assert info.scope == "att_1"
    msgs = [m for _, _, m in env.progress]
    assert msgs[0] == "exit: started" and msgs[-1] == "exit: finished"


async def test_argv_injection_stays_one_literal_element(env: Env, tmp_path: Path) -> None:
    canary = env.ws / "canary"
    canary.write_text("still here")
    for word in ("x; rm -rf canary", "--flag", "$(rm canary)", "a b  c", "*"):
        r = await env.run("args", {"word": word})
        assert r.ok, r.error
        out = await env.read_artifact(r.value["stdout"]["artifact_id"])
        import json

        assert json.loads(out) == ["--", word]
        assert r.value["argv"][-1] == word
    assert canary.read_text() == "still here"
    r = await env.run("args", {"word": "a\nb"})
    assert not r.ok and r.error.code == "invalid_params"
    r = await env.run("exit", {"code": "0; reboot"})
    assert not r.ok and r.error.code == "invalid_params" and r.receipt.handler_started is False


async def test_environment_is_an_allow_list(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("OF_ALLOWED", "yes")
    monkeypatch.setenv("OF_SECRET", "do-not-leak")
    r = await env.run("env")
    seen = json.loads(await env.read_artifact(r.value["stdout"]["artifact_id"]))
    assert seen.get("OF_ALLOWED") == "yes" and seen.get("OF_FIXED") == "fixed"
    assert "OF_SECRET" not in seen
    assert set(seen) <= {"PATH", "OF_ALLOWED", "OF_FIXED", "PWD", "SHLVL", "_", "LC_CTYPE"}


async def test_timeout_kills_the_process_group(env: Env) -> None:
    r = await env.run("hang")
    assert r.ok, r.error
    assert r.value["timed_out"] is True and r.value["passed"] is False and r.value["exit_code"] is None
    assert r.value["stdout"]["artifact_id"] is None and r.value["stdout"]["size"] == 0  # empty: no artifact
    bg = int((env.ws / "bg.pid").read_text())
    main = int((env.ws / "main.pid").read_text())
    assert not alive(main)
    assert await _dies(bg), "the background child of the timed-out command survived"


async def test_cancellation_kills_the_process_group(env: Env) -> None:
    # Same command, but with a long timeout: only cancellation can stop it.
    started = anyio.Event()

    async def progress(p: float, t: float | None, m: str | None) -> None:
        if m and m.endswith("started"):
            started.set()

    ctx = env.ctx.replace(progress=progress)
    hang = env.catalog.step("hang")
    object.__setattr__(hang, "timeout_s", 600.0)
    registry = ToolRegistry(create_step_tools(env.catalog, store=env.store))
    result: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            result.append(await registry.execute_detailed("of_step.hang", {}, ctx))

        tg.start_soon(call)
        await started.wait()
        with anyio.fail_after(30):
            while _pid(env.ws / "bg.pid") is None or _pid(env.ws / "main.pid") is None:
                await anyio.sleep(0.01)
        bg, main = _pid(env.ws / "bg.pid"), _pid(env.ws / "main.pid")
        assert bg is not None and main is not None
        assert alive(bg) and alive(main)
        tg.cancel_scope.cancel()
    assert await _dies(main)
    assert await _dies(bg)
    assert result == []  # the call was cancelled with its caller


async def test_cwd_is_inside_the_workspace(env: Env) -> None:
    r = await env.run("pwd")
    assert (await env.read_artifact(r.value["stdout"]["artifact_id"])).decode().strip() == str((env.ws / "src").resolve())
    assert env.catalog.step("pwd").cwd == "src"


async def test_program_not_found_is_a_clean_known_failure(env: Env) -> None:
    r = await env.run("missing")
    assert not r.ok and r.error.code == "command_not_started"
    assert r.receipt.certainty == "known"


async def test_large_output_reads_back_chunk_by_chunk(env: Env) -> None:
    r = await env.run("big")
    ev = r.value["stdout"]
    assert ev["size"] == 256 * 400 and not ev["truncated"]
    chunks = 0
    data, off = b"", 0
    while True:
        ch = await env.store.read(ev["artifact_id"], offset=off)
        assert len(ch.data) <= 16 * 1024
        data += ch.data
        off += len(ch.data)
        chunks += 1
        if ch.eof:
            break
    assert chunks > 1 and data == bytes(range(256)) * 400
    assert "sha256:" + hashlib.sha256(data).hexdigest() == ev["sha256"]


async def test_output_beyond_the_capture_limit_is_truncated(tmp_path: Path) -> None:
    env = Env(tmp_path, capture_limit=1000)
    r = await env.run("big")
    ev = r.value["stdout"]
    assert ev["truncated"] and ev["size"] == 1000
    assert await env.read_artifact(ev["artifact_id"]) == (bytes(range(256)) * 4)[:1000]


async def test_quota_exhaustion_keeps_the_evidence(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.store = ArtifactStore(tmp_path / "tiny", quota_bytes=10)
    env.registry = ToolRegistry(create_step_tools(env.catalog, store=env.store))
    r = await env.run("big")
    assert r.ok and r.value["exit_code"] == 0
    assert r.value["stdout"]["artifact_id"] is None and "Quota" in r.value["stdout"]["artifact_error"]
    assert r.value["stdout"]["sha256"] == "sha256:" + hashlib.sha256(bytes(range(256)) * 400).hexdigest()


async def test_write_file_atomic_with_prior_digest(env: Env) -> None:
    target = env.ws / "src" / "pkg" / "mod.py"
    r = await env.run("write_src", {"path": "src/pkg/mod.py", "content": "a = 1\n"})
    assert r.ok, r.error
    assert target.read_text() == "a = 1\n"
    assert r.value["prior_sha256"] is None and r.value["changed"] is True
    first = r.value["sha256"]
    os.chmod(target, 0o640)
    r = await env.run("write_src", {"path": "src/pkg/mod.py", "content": base64.b64encode(b"\x00\x01").decode(), "encoding": "base64"})
    assert r.value["prior_sha256"] == first and target.read_bytes() == b"\x00\x01"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # mode kept across the atomic replace
    assert sorted(p.name for p in target.parent.iterdir()) == ["mod.py"]  # no temp files left
    # A lone surrogate is not UTF-8 text. (The core executor currently raises on such
    # params before the handler runs -- reported upstream -- so check the step's own guard.)
    from openfunctions.work._errors import PlanInvalid

    with pytest.raises(PlanInvalid, match="lone surrogate"):
        prepare_reconciliation(env.catalog, env.catalog.step("write_src"), {"path": "src/bad", "content": "\ud800"})
    r = await env.run("write_src", {"path": "src/big", "content": "x" * 1001})
    assert not r.ok and r.error.code == "plan_invalid" and r.receipt.certainty == "known"


@pytest.mark.parametrize(
    "path, granted",
    [
        ("../outside.txt", ["src/**"]),
        ("/tmp/abs.txt", ["src/**"]),
        ("src/escape/x.txt", ["src/**"]),
        ("docs/x.md", ["**"]),
        ("src/b.txt", ["src/pkg/**"]),
        ("src/b.txt", None),
    ],
)
async def test_write_file_refused_outside(env: Env, path: str, granted: list[str] | None) -> None:
    outside = env.tmp / "outside"
    outside.mkdir()
    (env.ws / "src" / "escape").symlink_to(outside)
    md: dict[str, Any] = {"artifact_scope": "att_1"}
    if granted is not None:
        md["granted_paths"] = granted
    r = await env.run("write_src", {"path": path, "content": "pwned"}, ctx=env.ctx.replace(metadata=md))
    assert not r.ok
    assert r.error.code == "path_outside_grant", r.error
    assert r.receipt.certainty == "known"  # refused before any effect
    assert list(outside.iterdir()) == []
    assert not (env.tmp / "outside.txt").exists() and not Path("/tmp/abs.txt").exists()
    assert not (env.ws / "src" / "b.txt").exists()


async def test_read_file_inline_and_as_artifact(env: Env) -> None:
    (env.ws / "src" / "small.txt").write_text("hello")
    (env.ws / "src" / "bin.dat").write_bytes(b"\xff\xfe" * 20000)
    r = await env.run("read_src", {"path": "src/small.txt"})
    assert r.value["content"] == "hello" and "artifact_id" not in r.value
    r = await env.run("read_src", {"path": "src/bin.dat"})
    assert "content" not in r.value
    assert await env.read_artifact(r.value["artifact_id"]) == b"\xff\xfe" * 20000
    r = await env.run("read_src", {"path": "src/none.txt"})
    assert not r.ok and r.error.code == "plan_invalid"
    (env.ws / "src" / "sub").mkdir()
    os.mkfifo(env.ws / "src" / "fifo")  # would block a naive open() forever
    for p in ("src/sub", "src/fifo"):
        r = await env.run("read_src", {"path": p})
        assert not r.ok and r.error.code == "plan_invalid" and r.receipt.certainty == "known", r.error
    r = await env.run("write_src", {"path": "src/fifo", "content": "x"})
    assert not r.ok and r.receipt.certainty == "known", r.error


async def test_fingerprint_step_and_capabilities(env: Env) -> None:
    (env.ws / "src" / "a.py").write_text("a")
    (env.ws / "other.txt").write_text("b")
    r = await env.run("snap")
    assert r.value["files"] == {"src/a.py": "sha256:" + hashlib.sha256(b"a").hexdigest()}
    assert env.registry.get("of_step.snap").schedule_class == "shared"
    assert env.registry.get("of_step.read_src").schedule_class == "shared"
    assert env.registry.get("of_oracle.write_src").schedule_class == "shared"
    assert env.registry.get("of_step.write_src").schedule_class == "exclusive"
    assert env.registry.get("of_step.write_src").capability.effect == "write"
    assert env.registry.get("of_step.hang").capability.effect == "external"
    assert "of_oracle.hang" not in env.registry  # no readback -> no oracle
    assert env.registry.get("of_step.snap").annotations.read_only_hint is True


async def oracle(env: Env, step: str, readback: dict[str, Any]) -> dict[str, Any]:
    r = await env.registry.execute_detailed(f"of_oracle.{step}", {"readback": readback}, env.ctx)
    assert r.ok, r.error
    return r.value


async def test_write_file_oracle_statuses(env: Env) -> None:
    cat, step = env.catalog, env.catalog.step("write_src")
    params = {"path": "src/new.txt", "content": "new"}
    rb = prepare_reconciliation(cat, step, params)
    assert rb["prior_sha256"] is None and rb["path"] == "src/new.txt"
    assert (await oracle(env, "write_src", rb))["status"] == "not_applied"
    await env.run("write_src", params)
    assert (await oracle(env, "write_src", rb))["status"] == "applied"
    (env.ws / "src" / "new.txt").write_text("someone else")
    v = await oracle(env, "write_src", rb)
    assert v["status"] == "inconclusive" and v["observed"]["sha256"] != rb["expected_sha256"]
    # overwrite of an existing file: prior content means not applied
    rb2 = prepare_reconciliation(cat, step, {"path": "src/new.txt", "content": "third"})
    assert rb2["prior_sha256"] == "sha256:" + hashlib.sha256(b"someone else").hexdigest()
    assert (await oracle(env, "write_src", rb2))["status"] == "not_applied"
    # metadata for another step is refused, not misread
    r = await env.registry.execute_detailed("of_oracle.write_src", {"readback": {**rb, "step": "other"}}, env.ctx)
    assert not r.ok and r.error.code == "plan_invalid"


async def test_command_readback_oracle_statuses(env: Env) -> None:
    cat = env.catalog
    rb = prepare_reconciliation(cat, cat.step("touch"), {})
    assert (await oracle(env, "touch", rb))["status"] == "not_applied"  # changes_on_apply = true
    await env.run("touch")
    assert (await oracle(env, "touch", rb))["status"] == "inconclusive"  # not idempotent: maybe partial
    rb = prepare_reconciliation(cat, cat.step("fmt"), {})
    assert (await oracle(env, "fmt", rb))["status"] == "inconclusive"  # unchanged proves nothing here
    await env.run("fmt")
    v = await oracle(env, "fmt", rb)
    # changed, but a run may stop half way: an idempotent step is "partial" (run it again), never "applied"
    assert v["status"] == "partial" and v["observed"]["diff"]["added"] == ["src/a.py"]
    assert prepare_reconciliation(cat, cat.step("exit"), {"code": 0}) == {"v": 1, "step": "exit", "kind": "command", "reconcilable": False}


def test_write_refuses_a_directory_swapped_for_a_symlink_after_the_check(tmp_path: Path) -> None:
    """Resolve, then an attacker swaps a directory for a symlink: the write must not follow it."""
    from openfunctions.work._errors import PathOutsideGrant
    from openfunctions.work._steps import write_atomically

    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    real = (ws / "src" / "pkg" / "a.py").resolve()  # what the path check produced
    (ws / "src" / "pkg").rename(ws / "src" / "moved")
    (ws / "src" / "pkg").symlink_to(outside)
    with pytest.raises(PathOutsideGrant, match="no longer a plain directory"):
        write_atomically(real, b"pwned")
    assert list(outside.iterdir()) == []
    # the unswapped case writes, creating missing directories
    write_atomically((ws / "src" / "new" / "deep" / "b.py").resolve(), b"ok")
    assert (ws / "src" / "new" / "deep" / "b.py").read_bytes() == b"ok"
