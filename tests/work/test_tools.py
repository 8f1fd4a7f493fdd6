"""The of_work_* tools through the work profile's registry (real executor, steps, journal, store).

Calls go through ``profile.registry`` — the projection an MCP server
serves — with a trusted context carrying the principal, exactly as the
server would make them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from typing import Any

import anyio
import pytest

from openfunctions.core import ToolExecutionContext, canonical_bytes, pretty_json
from openfunctions.work import WORK_TOOL_NAMES, build_work_profile

PY = sys.executable
BUDGET = 32 * 1024

CATALOG = f"""
[steps.write_src]
kind = "write_file"
description = "write a file under src/"
paths = ["src/**"]

[steps.shout]
kind = "command"
description = "print n bytes"
argv = ['{PY}', "-c", "import sys; sys.stdout.write('x' * int(sys.argv[1]))", "{{n}}"]
effect = "read"
env = ["PATH"]
[steps.shout.params.n]
type = "integer"
minimum = 0
maximum = 2000000

[steps.nap]
kind = "command"
description = "append to nap.txt, then sleep"
argv = ['{PY}', "-c", "import time; open('nap.txt','a').write('x'); time.sleep(60)"]
effect = "write"
env = ["PATH"]

[steps.check]
kind = "command"
description = "the test suite: src/a.txt must say hello"
argv = ['{PY}', "-c", "import pathlib,sys; sys.exit(0 if pathlib.Path('src/a.txt').read_text() == 'hello' else 1)"]
effect = "read"
verifier = true
env = ["PATH"]
"""


class Session:
    """An agent's view: call tools by name, get (structured, result, receipt)."""

    def __init__(self, profile: Any, principal: str = "agent") -> None:
        self.profile = profile
        self.principal = principal
        self.progress: list[tuple[float, float | None, str | None]] = []

    async def call(self, name: str, params: dict[str, Any] | None = None) -> Any:
        async def progress(p: float, total: float | None, msg: str | None) -> None:
            self.progress.append((p, total, msg))

        ctx = ToolExecutionContext(principal=self.principal, progress=progress)
        return await self.profile.registry.execute_detailed(name, params or {}, ctx)

    async def ok(self, name: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        dr = await self.call(name, params)
        assert dr.ok, (name, dr.error and dr.error.to_dict())
        payload = dr.result.structured
        assert len(canonical_bytes(payload)) <= BUDGET and len(pretty_json(payload).encode()) <= BUDGET
        return payload

    async def read_artifact(self, artifact_id: str) -> bytes:
        out, offset = b"", 0
        while True:
            chunk = await self.ok("of_work_artifact_read", {"artifact_id": artifact_id, "offset": offset})
            data = base64.b64decode(chunk["data_base64"])
            assert len(data) <= 16 * 1024
            out += data
            offset += len(data)
            if chunk["eof"]:
                assert chunk["sha256"] == "sha256:" + hashlib.sha256(out).hexdigest()
                return out


@pytest.fixture
async def work(env):
    env.write_catalog(CATALOG)
    (env.ws / "src").mkdir()
    await env.grant(["write_src", "shout", "nap", "check"], paths=["src/**"])
    profiles = []

    def make(**kw: Any):
        p = build_work_profile(env.data, catalog_path=env.catalog_path, **kw)
        profiles.append(p)
        return p

    yield make
    for p in profiles:
        await p.aclose()


async def _start(s: Session, plan: list[dict[str, Any]]) -> dict[str, Any]:
    prv = await s.ok("of_work_preview", {"plan": plan})
    return await s.ok("of_work_start", {"previewId": prv["previewId"]})


@pytest.mark.anyio
async def test_the_profile_serves_exactly_the_work_tools_with_schemas_and_honest_hints(work):
    profile = work()
    names = sorted(t.name for t in profile.registry.list())
    assert names == sorted(WORK_TOOL_NAMES)
    read_only = {"of_work_catalog", "of_work_status", "of_work_preview", "of_work_artifact_read"}
    for t in profile.registry.list():
        assert t.input_schema["type"] == "object" and t.output_schema is not None, t.name
        assert bool(t.annotations.read_only_hint) == (t.name in read_only), t.name
    # steps are reachable only through the controller
    assert "of_step.write_src" not in profile.registry and "of_step.write_src" in profile.internal


@pytest.mark.anyio
async def test_whole_lifecycle_through_the_tools(work):
    s = Session(work())
    cat = await s.ok("of_work_catalog")
    assert {st["name"] for st in cat["steps"]} == {"write_src", "shout", "nap", "check"}
    assert cat["grants"] and cat["grants"][0]["principal"] == "agent"
    plan = [{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}, {"step": "shout", "params": {"n": 5}}]
    prv = await s.ok("of_work_preview", {"plan": plan})
    assert prv["allGranted"] and not (s.profile.catalog.workspace / "src" / "a.txt").exists(), "preview runs nothing"
    att = await s.ok("of_work_start", {"previewId": prv["previewId"]})
    again = await s.call("of_work_start", {"previewId": prv["previewId"]})
    assert not again.ok and again.error.code == "attempt_active" and att["attemptId"] in again.error.message
    r1 = await s.ok("of_work_run_step")
    assert r1["operation"]["status"] == "done" and r1["result"]["sha256"] == "sha256:" + hashlib.sha256(b"hello").hexdigest()
    r2 = await s.ok("of_work_run_step", {"step": "shout"})
    assert r2["result"]["exit_code"] == 0 and r2["remaining"] == 0
    assert any(m and "finished" in m for _, _, m in s.progress), "the command reported progress"
    v = await s.ok("of_work_verify")
    assert v["passed"] and v["state"] == "verified"
    done = await s.ok("of_work_complete")
    assert done["state"] == "completed" and done["proofDigest"] == v["proof"]["proof_digest"]
    st = await s.ok("of_work_status")
    assert st["attempt"]["state"] == "completed"


@pytest.mark.anyio
async def test_schema_and_catalog_rejections_happen_in_the_executor(work):
    s = Session(work())
    for bad in (
        {"plan": [{"step": "rm_rf"}]},
        {"plan": [{"step": "shout", "params": {"n": "5; rm -rf /"}}]},
        {"plan": [{"step": "shout", "params": {"n": 5, "argv": ["sh"]}}]},
        {"plan": [{"step": "write_src", "params": {"path": "src/a"}}]},
        {"plan": []},
    ):
        dr = await s.call("of_work_preview", bad)
        assert not dr.ok and dr.error.code == "invalid_params", bad
        assert dr.receipt.outcome == "rejected" and not dr.receipt.handler_started
    assert s.profile.controller.state.previews == {}


@pytest.mark.anyio
async def test_a_controller_refusal_that_ran_nothing_is_rejected_known(work):
    # refused calls that ran nothing are `rejected`/`known`, not `failed`
    s = Session(work())
    prv = await s.ok("of_work_preview", {"plan": [{"step": "write_src", "params": {"path": "src/a.txt", "content": "x"}}]})
    await s.ok("of_work_start", {"previewId": prv["previewId"]})
    dr = await s.call("of_work_run_step", {"step": "shout", "index": 0})  # contradicts plan[0]
    assert not dr.ok and dr.error.code == "plan_invalid"
    assert (dr.receipt.outcome, dr.receipt.certainty, dr.receipt.handler_started) == ("rejected", "known", True)
    dr = await s.call("of_work_complete")  # nothing verified yet: refused before anything ran
    assert not dr.ok and (dr.receipt.outcome, dr.receipt.certainty) == ("rejected", "known")


@pytest.mark.anyio
async def test_paths_outside_the_grant_are_refused_and_nothing_is_written(work, env):
    s = Session(work())
    (env.root / "outside").mkdir()
    (env.ws / "src" / "link").symlink_to(env.root / "outside")
    for path in ("../escape.txt", "/etc/passwd", "src/../../escape.txt", "src/link/evil.txt", "README.md"):
        dr = await s.call("of_work_preview", {"plan": [{"step": "write_src", "params": {"path": path, "content": "x"}}]})
        if dr.ok:  # the preview names it as not granted; starting is refused
            assert not dr.result.structured["allGranted"], path
            st = await s.call("of_work_start", {"previewId": dr.result.structured["previewId"]})
            assert not st.ok and st.error.code == "path_outside_grant", (path, st.error.to_dict())
        else:
            assert dr.error.code in ("path_outside_grant", "invalid_params"), (path, dr.error.to_dict())
    assert not (env.root / "escape.txt").exists() and not list((env.root / "outside").iterdir())


@pytest.mark.anyio
async def test_artifact_read_serves_this_attempt_and_previews_only(work):
    s = Session(work())
    att1 = await _start(s, [{"step": "shout", "params": {"n": 100_000}}])
    r = await s.ok("of_work_run_step")
    out = r["result"]["stdout"]
    assert out["artifact_id"] in r["artifacts"]  # the step's output is linked to the attempt's evidence
    big = await s.read_artifact(out["artifact_id"])  # chunk by chunk, digest checked
    assert big == b"x" * 100_000 and out["sha256"] == "sha256:" + hashlib.sha256(big).hexdigest()
    await s.ok("of_work_cancel", {"reason": "next"})
    prv2 = await s.ok("of_work_preview", {"plan": [{"step": "shout", "params": {"n": 1}}]})
    att2 = await s.ok("of_work_start", {"previewId": prv2["previewId"]})
    assert att2["attemptId"] != att1["attemptId"]
    # another attempt's artifact: refused exactly like an unknown id
    other = await s.call("of_work_artifact_read", {"artifact_id": out["artifact_id"]})
    assert not other.ok and other.error.code == "artifact_not_found"
    # preview artifacts stay readable after the start
    payload = json.loads(await s.read_artifact(prv2["artifactId"]))
    assert payload["previewId"] == prv2["previewId"]
    # hostile ids never reach the filesystem
    for hostile in ("../../etc/passwd", "art_" + "0" * 32, "art_" + "g" * 32, "/etc/passwd", "art_%2e%2e", "x" * 256):
        dr = await s.call("of_work_artifact_read", {"artifact_id": hostile})
        assert not dr.ok and dr.error.code in ("artifact_not_found", "invalid_params"), hostile
    # another principal sees nothing of ours
    intruder = Session(s.profile, principal="intruder")
    dr = await intruder.call("of_work_artifact_read", {"artifact_id": prv2["artifactId"]})
    assert not dr.ok and dr.error.code == "artifact_not_found"


def _big_plan(n: int = 120) -> list[dict[str, Any]]:
    return [{"step": "write_src", "params": {"path": f"src/f{i}.txt", "content": "y" * 300}} for i in range(n)]


@pytest.mark.anyio
async def test_large_replies_are_projected_into_an_artifact_and_reused(work):
    profile = work()
    s = Session(profile)
    prv = await s.ok("of_work_preview", {"plan": _big_plan()})
    proj = prv["artifactProjection"]
    assert proj["available"] and prv["previewId"].startswith("prv_")
    full = json.loads(await s.read_artifact(proj["artifact_id"]))
    assert full["previewId"] == prv["previewId"] and len(full["steps"]) == 120
    await s.ok("of_work_start", {"previewId": prv["previewId"]})
    for _ in range(120):
        await s.ok("of_work_run_step")
    st1 = await s.ok("of_work_status")
    assert st1["attempt"]["state"] == "running" and st1["artifactProjection"]["available"]
    st2 = await s.ok("of_work_status")
    assert st2["artifactProjection"]["artifact_id"] == st1["artifactProjection"]["artifact_id"], "unchanged status reuses its artifact"
    await profile.aclose()
    s2 = Session(work())
    st3 = await s2.ok("of_work_status")
    assert st3 == st1, "after a restart the unchanged status reuses the same artifact"
    full = json.loads(await s2.read_artifact(st3["artifactProjection"]["artifact_id"]))
    assert len(full["attempt"]["operations"]) == 120


@pytest.mark.anyio
async def test_status_reuses_its_artifact_across_restart_when_nothing_changed(work):
    profile = work()
    s = Session(profile)
    prv = await s.ok("of_work_preview", {"plan": _big_plan()})
    await s.ok("of_work_start", {"previewId": prv["previewId"]})
    for _ in range(120):
        await s.ok("of_work_run_step")
    await s.ok("of_work_cancel")
    first = await s.ok("of_work_status", {"attemptId": s.profile.controller._last_attempt().attempt_id})
    await profile.aclose()
    s2 = Session(work())
    again = await s2.ok("of_work_status", {"attemptId": first["attempt"]["attemptId"]})
    assert again["artifactProjection"]["artifact_id"] == first["artifactProjection"]["artifact_id"]
    assert s2.profile.controller.lease.generation == 2


@pytest.mark.anyio
async def test_quota_exhaustion_keeps_success_and_says_projection_unavailable(work):
    s = Session(work(quota_bytes=4096))
    prv = await s.ok("of_work_preview", {"plan": _big_plan()})
    assert prv["artifactProjection"] == {"available": False, "reason": prv["artifactProjection"]["reason"]}
    assert "quota" in prv["artifactProjection"]["reason"]
    assert prv["previewId"].startswith("prv_") and prv["allGranted"] is True
    att = await s.ok("of_work_start", {"previewId": prv["previewId"]})
    assert att["state"] == "started"


@pytest.mark.anyio
async def test_cancelling_a_long_step_blocks_the_attempt_with_an_unknown_operation(work, env):
    s = Session(work())
    await _start(s, [{"step": "nap"}])
    with anyio.move_on_after(30):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await s.call("of_work_run_step")

            tg.start_soon(run)
            # wait until the command has started (it wrote its mark), then cancel the call
            # (open() creates the file before the write lands: wait for the content, not the name)
            while not (env.ws / "nap.txt").exists() or (env.ws / "nap.txt").read_text() != "x":
                await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    st = await s.ok("of_work_status")
    att = st["attempt"]
    assert att["state"] == "blocked" and att["operations"][0]["status"] == "unknown"
    assert (env.ws / "nap.txt").read_text() == "x"
    refused = await s.call("of_work_run_step")
    assert not refused.ok and refused.error.code == "effect_uncertain"
    # nap declares no readback: reconcile is inconclusive every time, only a cancel moves on (docs/WORK.md)
    for _ in range(2):
        rec = await s.ok("of_work_reconcile")
        assert rec["reconciled"][0]["verdict"] == "inconclusive" and rec["state"] == "blocked"
    assert (await s.ok("of_work_cancel"))["state"] == "cancelled"


@pytest.mark.anyio
async def test_no_principal_means_no_authority(work):
    s = Session(work(), principal=None)  # the server configured no principal
    dr = await s.call("of_work_preview", {"plan": [{"step": "shout", "params": {"n": 1}}]})
    assert dr.ok and dr.result.structured["allGranted"] is False
    st = await s.call("of_work_start", {"previewId": dr.result.structured["previewId"]})
    assert not st.ok and st.error.code == "grant_denied"


@pytest.mark.anyio
async def test_reply_bounding_at_the_32_kib_edge(work):
    from openfunctions.work._tools import WorkTools

    profile = work()
    tools = WorkTools(profile.controller, store=profile.store)

    def payload(n: int) -> dict[str, Any]:
        return {"attemptId": "att_x", "state": "running", "blob": "a" * n}

    def size(p: dict[str, Any]) -> int:
        return max(len(canonical_bytes(p)), len(pretty_json(p).encode()))

    n = BUDGET - size(payload(0))
    assert size(payload(n)) == BUDGET
    at_edge = await tools.reply(payload(n), scope="att_x")
    assert at_edge == payload(n), "a reply of exactly 32 KiB goes out as is"
    over = await tools.reply(payload(n + 1), scope="att_x")
    assert over["artifactProjection"]["available"] and over["attemptId"] == "att_x" and over["state"] == "running"
    assert "blob" not in over and size(over) <= BUDGET


@pytest.mark.anyio
async def test_over_budget_verify_and_completion_replies_still_carry_the_proof_digest(work, env):
    from openfunctions.work._tools import WorkTools

    # a workspace large enough that the proof's file maps push the verify reply over 32 KiB
    for i in range(400):
        (env.ws / "src" / f"bulk_{i:04d}_{'n' * 40}.txt").write_text(str(i))
    profile = work()
    s = Session(profile)
    await _start(s, [{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}])
    await s.ok("of_work_run_step")
    v = await s.ok("of_work_verify")
    assert v["artifactProjection"]["available"] and v["passed"] and v["state"] == "verified"
    full = json.loads(await s.read_artifact(v["artifactProjection"]["artifact_id"]))
    assert v["proofDigest"] == full["proof"]["proof_digest"], "the bounded verify reply names its proof"
    done = await s.ok("of_work_complete")
    assert done["state"] == "completed" and done["proofDigest"] == v["proofDigest"]
    # The completion reply itself is three short fields, far below the budget
    # (project_reply's smallest budget is 1 KiB); were it ever over, the
    # tools' own projection keeps its identity, state and proof digest.
    tools = WorkTools(profile.controller, store=profile.store)
    over = await tools.reply({**done, "bulk": "z" * BUDGET}, scope=done["attemptId"])
    assert over["artifactProjection"]["available"] and "bulk" not in over
    assert (over["attemptId"], over["state"], over["proofDigest"]) == (done["attemptId"], "completed", done["proofDigest"])


@pytest.mark.anyio
async def test_a_profile_without_catalog_serves_tools_that_say_what_is_missing(tmp_path, monkeypatch):
    from openfunctions.work import CatalogInvalid

    monkeypatch.delenv("OPENFUNCTIONS_WORK_CATALOG", raising=False)
    with pytest.raises(CatalogInvalid, match="no work catalog"):
        build_work_profile(tmp_path, require_catalog=True)
    profile = build_work_profile(tmp_path)
    try:
        assert sorted(t.name for t in profile.registry.list()) == sorted(WORK_TOOL_NAMES)
        s = Session(profile)
        for name, params in (("of_work_catalog", {}), ("of_work_status", {}), ("of_work_preview", {"plan": [{"step": "x"}]}),
                             ("of_work_artifact_read", {"artifact_id": "art_" + "0" * 32})):
            dr = await s.call(name, params)
            assert not dr.ok and dr.error.code == "catalog_invalid" and "OPENFUNCTIONS_WORK_CATALOG" in dr.error.message, name
            assert dr.receipt.certainty == "known"
    finally:
        await profile.aclose()


def test_refusals_are_bounded_and_keep_only_scalar_details():
    from openfunctions.work._errors import PlanInvalid
    from openfunctions.work._tools import MAX_ERROR_CHARS, _refusal

    err = _refusal(PlanInvalid("x" * 100_000, details={"step": "s", "violations": [{"big": "y" * 100_000}]}))
    assert len(err.message) == MAX_ERROR_CHARS and err.message.endswith("...")
    assert err.code == "plan_invalid" and err.details == {"step": "s"} and err.effect_happened is False


@pytest.mark.anyio
async def test_plan_errors_name_the_bad_step_the_valid_ones_and_the_failed_parameter(work):
    """Not the schema validator's "$.plan[0]: {...} is not valid under any of the given schemas"."""
    s = Session(work())
    dr = await s.call("of_work_preview", {"plan": [{"step": "shoutt"}]})
    assert dr.error.code == "invalid_params" and "shoutt" in dr.error.message
    assert all(n in dr.error.message for n in ("check", "nap", "shout", "write_src")), dr.error.message
    dr = await s.call("of_work_preview", {"plan": [{"step": "write_src", "params": {"path": "src/a"}}, {"step": "shout", "params": {"n": "5; rm -rf /"}}]})
    assert "$.plan[1].params.n" in dr.error.message and "integer" in dr.error.message, dr.error.message
    dr = await s.call("of_work_preview", {"plan": [{"step": "write_src", "params": {"path": "src/a"}}]})
    assert "content" in dr.error.message and "required" in dr.error.message, dr.error.message
    for d in (dr,):
        assert "is not valid under any of the given schemas" not in d.error.message


@pytest.mark.anyio
async def test_the_work_artifact_reader_says_which_store_it_reads_and_replies_say_which_tool_reads_their_ids(work):
    """Not the same title and description as of_artifact_read, and a hint next to ids."""
    from openfunctions.artifacts import ArtifactStore, create_artifact_read_tool

    s = Session(work())
    mine = s.profile.registry.get("of_work_artifact_read")
    general = create_artifact_read_tool(ArtifactStore(s.profile.controller.root / "other"))
    assert mine.title != general.title and mine.description != general.description
    assert "of_artifact_read" in mine.description  # and it says which one it is not
    prv = await s.ok("of_work_preview", {"plan": [{"step": "shout", "params": {"n": 10}}]})
    assert prv["readWith"] == "of_work_artifact_read" and prv["artifactId"]
    await s.ok("of_work_start", {"previewId": prv["previewId"]})
    r = await s.ok("of_work_run_step", {})
    assert r["readWith"] == "of_work_artifact_read" and r["result"]["stdout"]["artifact_id"]


@pytest.mark.anyio
async def test_the_preview_schema_is_strict_and_a_strict_client_plan_is_accepted(work, env):
    """The per-step plan schema is one closed anyOf branch per step (an allOf of if/then is not strict), while errors still name the failing field (test_plan_errors_name_...)."""
    from openfunctions.core import strict_violations

    env.catalog_path.write_text(env.catalog_path.read_text() + """
[steps.shout2]
kind = "command"
description = "print with a pad"
argv = ["echo", "{pad}"]
effect = "read"
[steps.shout2.params.pad]
type = "string"
enum = ["a", "b"]
default = "a"
""")
    s = Session(work())
    tool = s.profile.registry.get("of_work_preview")
    assert strict_violations(tool.input_schema) == []
    branches = tool.input_schema["properties"]["plan"]["items"]["anyOf"]
    assert [b["properties"]["step"]["const"] for b in branches] == ["check", "nap", "shout", "shout2", "write_src"]
    assert all(b["required"] == ["step", "params"] and b["additionalProperties"] is False for b in branches)
    # what OpenAI's strict mode sends: every field, null for "use the default"
    prv = await s.ok("of_work_preview", {"plan": [{"step": "shout2", "params": {"pad": None}}, {"step": "check", "params": {}}]})
    assert prv["steps"][0]["params"] == {"pad": "a"} and prv["steps"][0]["argv"] == ["echo", "a"]
    # and a client that leaves params out for a step without any still may
    assert (await s.ok("of_work_preview", {"plan": [{"step": "check"}]}))["steps"][0]["params"] == {}


@pytest.mark.anyio
async def test_without_a_controller_every_tool_refuses_with_the_reason_and_runs_nothing():
    # a profile served before its catalog exists: each handler (reached directly, past validation) must refuse
    # with the reason given, never reach for the missing controller
    from openfunctions.core import ToolError
    from openfunctions.work import WorkError
    from openfunctions.work._tools import create_work_tools

    reason = WorkError("no work catalog at /nowhere/work.toml: write one first")
    tools = create_work_tools(None, unavailable=reason)
    assert {t.name for t in tools} >= set(WORK_TOOL_NAMES) - {"of_work_artifact_read"}
    for tool in tools:
        with pytest.raises(ToolError) as caught:
            await tool.handler({}, ToolExecutionContext(principal="alice"))
        assert caught.value.code == "work_error", tool.name
        assert "no work catalog at /nowhere/work.toml" in caught.value.message, tool.name
        assert caught.value.effect_happened is False, tool.name
