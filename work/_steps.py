"""Catalog steps as registry tools: ``of_step.<name>`` runs a step, ``of_oracle.<name>`` reads its effect back.

:func:`create_step_tools` turns a :class:`~openfunctions.work._catalog.Catalog`
into :class:`~openfunctions.core.ToolDefinition` objects for the work
controller's *internal* registry. They execute through the one path
(registry -> executor), so every step and oracle call has a receipt. Do not
project them onto an MCP server: agents reach steps only through the
controller (``of_work_run_step``), which checks authority first.

Every tool's output is *evidence*:

- ``command`` -> ``{step, argv, cwd, exit_code, signal, timed_out, passed,
  duration_ms, stdout: {artifact_id, sha256, size, truncated, tail}, stderr: {...}}``.
  The command runs as a real subprocess in its own session/process group
  (no shell; argv from :meth:`StepSpec.expand_argv`), with a scrubbed
  environment (the step's ``env`` allow-list plus ``env_set``), stdin from
  ``/dev/null``, and a timeout. On timeout the group gets SIGTERM, then
  SIGKILL after 2 s; on cancellation it gets SIGKILL at once; when the main
  process exits, any process it left in its group is killed. stdout/stderr
  are streamed to the artifact store (scope ``ctx.work.artifact_scope``),
  capped at ``capture_limit`` bytes each (``truncated`` says so); ``tail`` is
  the last 2 KiB as text. An empty stream stores no artifact (``artifact_id`` null, ``size`` 0). A non-zero exit is evidence, not a tool failure.
  While it runs the tool reports progress about once a second.
- ``write_file`` -> ``{step, path, sha256, size, prior_sha256, changed}``:
  written atomically (temp file in the target directory, fsync, rename,
  fsync of the directory), keeping an existing file's mode.
- ``read_file`` -> ``{step, path, sha256, size, content | artifact_id}``:
  text up to 16 KiB inline, anything larger or binary as an artifact.
- ``fingerprint`` -> ``{step, files: {relpath: sha256}, count, digest}``.

Paths (``write_file``/``read_file``): the handler resolves the path itself,
symlinks included, and requires it inside the workspace, inside the step's
catalog patterns, and inside the grant's patterns, which the controller
passes in ``ctx.work.granted_paths`` (a :class:`~openfunctions.core.WorkGrant`;
the patterns of the grant :meth:`Authority.check` returned). Without them a
path step refuses to run (fail closed). Deprecated, for one version: a context
without ``work`` is read from the metadata keys ``granted_paths``,
``artifact_scope``, ``operation_id`` and ``on_spawn``. This is a second check right before
the write, after the controller's authority check. Refusals are
``ToolError``s with ``effect_happened=False`` and the work error's code
(``path_outside_grant``, ``plan_invalid``, ...).

Reconciliation: before dispatching an effectful step, the controller calls
:func:`prepare_reconciliation` and saves its result with the intent. After a
crash, ``of_oracle.<name>`` (a parallel-safe read) takes that saved metadata
and answers ``{status: "applied" | "not_applied" | "inconclusive", observed}``:

- ``write_file``: the file's current digest equals the intended one ->
  ``applied``; equals the prior digest (or the file is still absent) ->
  ``not_applied``; anything else -> ``inconclusive``.
- ``command`` with a catalog ``readback``: fingerprints of the readback
  paths, before vs now. Changed -> ``partial`` if the step is idempotent
  (the run may have stopped half way; the operation counts as not done, so
  the step is run again, which is harmless), else ``inconclusive`` (the
  command may have been interrupted half way);
  unchanged -> ``not_applied`` only if the operator declared
  ``changes_on_apply = true``, else ``inconclusive``.
- ``command`` without a readback has no oracle: its uncertain effects are
  inconclusive by construction and an operator must resolve them.
- ``tool`` (a registered tool run as the step, catalog ``reconcile = true``):
  the binding the tool's capability declares.
  :func:`prepare_tool_reconciliation` saves ``{v, step, kind, tool,
  spec_sha256, reconcilable, params, prepared}`` where ``prepared`` is what
  ``capability.prepare_reconciliation(params)`` returned (JSON; if it raises,
  the step does not run); the oracle answers with
  ``capability.reconcile_effect(params, prepared)``, normalized: a status
  other than applied / not_applied / partial / mismatch / inconclusive, a
  non-object answer, an exception, or a tool whose spec changed since the
  intent -> ``inconclusive``; ``partial`` of a non-idempotent step ->
  ``inconclusive`` (as for a command); ``mismatch`` (the readback
  contradicts the intent) keeps the operation unknown.

A crash of the server process does not kill a running command (it is in its
own session): it runs on, unsupervised and without its timeout, and its
output is lost. So the handler tells the controller its process group as
soon as it exists (``ctx.work.on_spawn(pid)``, journaled as a
``spawned`` record) and marks the command's environment with
``OPENFUNCTIONS_WORK_OPERATION=<operation id>``; reconciliation and an
operator's resolution refuse to conclude while any such process is alive
(see :mod:`openfunctions.work._procs`), and cancelling the attempt kills them.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import anyio.abc
from pydantic import BaseModel

from openfunctions.core import ToolDefinition, WorkGrant, check_json, define_tool, digest
from openfunctions.core.errors import NonJsonValue, ToolError
from openfunctions.core.files import fsync_dir, write_atomic

from ._catalog import Catalog, StepSpec
from ._errors import CatalogInvalid, PathOutsideGrant, PlanInvalid, ReconcileFailed, WorkError
from ._paths import matching_pattern, resolve_in_workspace
from ._procs import MARKER_ENV
from ._schemas import output_schema
from ._verification import diff_fingerprints, file_sha256, fingerprint, open_regular

DEFAULT_CAPTURE_LIMIT = 8 * 1024 * 1024
INLINE_READ_BYTES = 16 * 1024
TAIL_BYTES = 2048
TERM_GRACE_S = 2.0
PROGRESS_INTERVAL_S = 1.0
RECONCILIATION_VERSION = 1

class _Stream(BaseModel):
    artifact_id: str | None
    sha256: str
    size: int
    truncated: bool
    tail: str
    artifact_error: str | None = None


class CommandReply(BaseModel):
    step: str
    argv: list[str]
    cwd: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    passed: bool
    duration_ms: int
    stdout: _Stream
    stderr: _Stream


class WriteReply(BaseModel):
    step: str
    path: str
    sha256: str
    size: int
    prior_sha256: str | None
    changed: bool


class ReadReply(BaseModel):
    step: str
    path: str
    sha256: str
    size: int
    content: str | None = None
    artifact_id: str | None = None


class FingerprintReply(BaseModel):
    step: str
    files: dict[str, str]
    count: int
    digest: str


class OracleReply(BaseModel):
    step: str
    status: Literal["applied", "not_applied", "partial", "mismatch", "inconclusive"]
    observed: dict[str, Any]
    reason: str


# The step tools' reply schemas, from the models above (work/_schemas.output_schema).
COMMAND_OUTPUT_SCHEMA = output_schema(CommandReply)
WRITE_OUTPUT_SCHEMA = output_schema(WriteReply)
READ_OUTPUT_SCHEMA = output_schema(ReadReply)
FINGERPRINT_OUTPUT_SCHEMA = output_schema(FingerprintReply)
ORACLE_INPUT_SCHEMA = {
    "type": "object",
    "properties": {"readback": {"type": "object", "description": "the metadata prepare_reconciliation returned before dispatch"}},
    "required": ["readback"],
    "additionalProperties": False,
}
ORACLE_OUTPUT_SCHEMA = output_schema(OracleReply)


def _refuse(exc: WorkError) -> ToolError:
    """A work refusal before any effect, in the executor's clean-failure form."""
    return ToolError(exc.message, code=exc.code, effect_happened=False, details=exc.details)


# -- paths ----------------------------------------------------------------------


def _work(ctx: Any) -> WorkGrant:
    """The call's work grant: ``ctx.work``, else (deprecated) one read from the old metadata keys."""
    grant = getattr(ctx, "work", None)
    if isinstance(grant, WorkGrant):
        return grant
    md = getattr(ctx, "metadata", None)
    if not isinstance(md, Mapping):
        return WorkGrant()
    pats, scope, op, on_spawn = md.get("granted_paths"), md.get("artifact_scope"), md.get("operation_id"), md.get("on_spawn")
    return WorkGrant(
        operation_id=op if isinstance(op, str) else None,
        granted_paths=tuple(pats) if isinstance(pats, (list, tuple)) else None,
        artifact_scope=scope if isinstance(scope, str) else None,
        on_spawn=on_spawn if callable(on_spawn) else None,
    )


def _granted_paths(ctx: Any) -> list[str]:
    pats = _work(ctx).granted_paths
    if pats is None or not all(isinstance(p, str) for p in pats):
        raise PathOutsideGrant(
            "no granted path patterns in the trusted context (ctx.work.granted_paths); "
            "path steps run only through the work controller"
        )
    return list(pats)


def check_step_path(catalog: Catalog, step: StepSpec, path: str, granted: list[str] | None) -> tuple[Path, str]:
    """Resolve ``path`` and require it inside the workspace, the step's patterns and ``granted``.

    Returns ``(real_path, relpath)``; raises :class:`PathOutsideGrant`.
    """
    real, rel = resolve_in_workspace(catalog.workspace, path)
    if step.paths and matching_pattern(rel, step.paths) is None:
        raise PathOutsideGrant(
            f"path {path!r} (resolved: {rel!r}) is outside step {step.name!r}'s catalog patterns ({', '.join(step.paths)})",
            details={"path": path, "resolved": rel, "step": step.name},
        )
    if granted is not None and matching_pattern(rel, granted) is None:
        raise PathOutsideGrant(
            f"path {path!r} (resolved: {rel!r}) matches no granted path pattern ({', '.join(granted) or 'none granted'})",
            details={"path": path, "resolved": rel, "step": step.name, "granted_paths": granted},
        )
    return real, rel


def _decode_content(step: StepSpec, params: Mapping[str, Any]) -> bytes:
    content = params["content"]
    if params.get("encoding", "utf-8") == "base64":
        import base64
        import binascii

        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise PlanInvalid(f"step {step.name!r}: content is not valid base64") from None
    else:
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise PlanInvalid(f"step {step.name!r}: content has a lone surrogate and is not valid UTF-8 text; use encoding=base64") from None
    if len(data) > step.max_bytes:
        raise PlanInvalid(
            f"step {step.name!r}: content is {len(data)} bytes, more than the catalog's max_bytes {step.max_bytes}",
            details={"size": len(data), "max_bytes": step.max_bytes},
        )
    return data


def _sha_or_none(real: Path) -> str | None:
    try:
        return file_sha256(real)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise PathOutsideGrant(f"{str(real)!r} is a directory, not a file") from None
    except OSError as exc:  # ELOOP: the final component became a symlink
        raise PathOutsideGrant(f"{str(real)!r} cannot be opened safely: {exc.strerror}") from None


# O_PATH (Linux) walks directories we may traverse but not list (e.g. a 0711 home).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


def _open_dir_chain(parent: Path, *, create: bool = True) -> int:
    """Open ``parent`` (an absolute, already resolved path) one component at a time
    without following symlinks, creating missing directories (each made durable).

    Between the path check and the write a directory could be swapped for a
    symlink; opening every component with ``O_NOFOLLOW`` relative to the
    previous one refuses that instead of writing through it.
    """
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in parent.parts[1:]:
            try:
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                    fsync_dir(fd)  # the new entry is durable in its parent
                    # the re-open is inside the same guard: a symlink swapped in
                    # between mkdir and here is refused like any other (ELOOP/ENOTDIR)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise PathOutsideGrant(
                    f"directory {part!r} of {str(parent)!r} is no longer a plain directory ({exc.strerror}); refusing to write through it"
                ) from None
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_atomically(real: Path, data: bytes) -> None:
    """Replace ``real`` (a resolved path) with ``data`` durably and atomically.

    The directory chain is opened without following symlinks; then
    :func:`openfunctions.core.files.write_atomic` writes a temp file beside
    the target (``O_EXCL|O_NOFOLLOW``), fsyncs it, renames it over the
    target and fsyncs the directory. An existing file's mode is kept; a new
    file gets ``0666 & ~umask`` (the user's own file, not a private one).
    """
    dfd = _open_dir_chain(real.parent)
    try:
        write_atomic(real.name, data, mode=None, dir_fd=dfd)
    finally:
        os.close(dfd)


# -- reconciliation -----------------------------------------------------------------


def prepare_reconciliation(catalog: Catalog, step: StepSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """Readback metadata to save with the intent, BEFORE dispatching an effectful step.

    ``write_file``: ``{v, step, kind, path, expected_sha256, expected_size, prior_sha256}``;
    ``command`` with a readback: ``{v, step, kind, patterns, before, changes_on_apply, idempotent}``;
    any other step: ``{v, step, kind, reconcilable: false}``. Blocking file IO:
    call it in a worker thread for large readbacks. Raises
    :class:`PlanInvalid` / :class:`PathOutsideGrant` for bad parameters.
    """
    base: dict[str, Any] = {"v": RECONCILIATION_VERSION, "step": step.name, "kind": step.kind}
    if step.kind == "write_file":
        full = step.validate_params(dict(params))
        data = _decode_content(step, full)
        real, rel = check_step_path(catalog, step, full["path"], None)
        return {
            **base,
            "reconcilable": True,
            "path": rel,
            "expected_sha256": "sha256:" + hashlib.sha256(data).hexdigest(),
            "expected_size": len(data),
            "prior_sha256": _sha_or_none(real),
        }
    if step.kind == "command" and step.readback is not None:
        return {
            **base,
            "reconcilable": True,
            "patterns": list(step.readback.paths),
            "before": fingerprint(catalog.workspace, step.readback.paths),
            "changes_on_apply": step.readback.changes_on_apply,
            "idempotent": step.idempotent,
        }
    return {**base, "reconcilable": False}


async def _call(fn: Any, *args: Any) -> Any:
    """A capability binding: async, or a plain function run in a worker thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    out = await anyio.to_thread.run_sync(fn, *args)
    return await out if inspect.isawaitable(out) else out


async def prepare_tool_reconciliation(step: StepSpec, tool: ToolDefinition, params: Mapping[str, Any]) -> dict[str, Any]:
    """Readback metadata for a ``tool`` step, from its capability's ``prepare_reconciliation`` (before dispatch).

    Raises :class:`ReconcileFailed` (nothing ran) when the binding raises or
    returns something that is not JSON.
    """
    base: dict[str, Any] = {"v": RECONCILIATION_VERSION, "step": step.name, "kind": step.kind, "tool": tool.name,
                            "spec_sha256": tool.spec_sha256}
    cap = tool.capability
    if not step.reconcilable or cap is None or cap.prepare_reconciliation is None:
        return {**base, "reconcilable": False}
    full = dict(params)
    try:
        prepared = await _call(cap.prepare_reconciliation, dict(full))
        check_json(prepared)
    except NonJsonValue as exc:
        raise ReconcileFailed(
            f"step {step.name!r}: tool {tool.name!r}'s prepare_reconciliation returned a value with no JSON form "
            f"({exc.message}); the step did not run", details={"step": step.name, "tool": tool.name},
        ) from None
    except Exception as exc:
        raise ReconcileFailed(
            f"step {step.name!r}: tool {tool.name!r}'s prepare_reconciliation raised {type(exc).__name__}: {str(exc)[:300]}; "
            "the step did not run (it cannot be reconciled without its readback)", details={"step": step.name, "tool": tool.name},
        ) from None
    return {**base, "reconcilable": True, "params": full, "prepared": prepared}


_STATUSES = ("applied", "not_applied", "partial", "mismatch", "inconclusive")


async def reconcile_tool_effect(step: StepSpec, tool: ToolDefinition, readback: Mapping[str, Any]) -> dict[str, Any]:
    """The oracle's answer for a ``tool`` step: its capability's ``reconcile_effect``, normalized (read-only)."""
    _check_readback_binding(step, readback)

    def answer(status: str, reason: str, observed: Any = None) -> dict[str, Any]:
        return {"step": step.name, "status": status, "observed": observed if isinstance(observed, dict) else {}, "reason": reason}

    if not readback.get("reconcilable"):
        return answer("inconclusive", "this step declares no readback")
    cap = tool.capability
    if readback.get("tool") != tool.name or cap is None or cap.reconcile_effect is None:
        return answer("inconclusive", f"tool {readback.get('tool')!r} no longer binds a readback")
    if readback.get("spec_sha256") != tool.spec_sha256:
        return answer("inconclusive", f"tool {tool.name!r} changed since the step ran (its spec digest differs); "
                      "its readback may no longer read what the run did")
    try:
        got = await _call(cap.reconcile_effect, dict(readback.get("params") or {}), readback.get("prepared"))
        check_json(got)
    except Exception as exc:  # a failed readback proves nothing either way
        return answer("inconclusive", f"the readback raised {type(exc).__name__}: {str(getattr(exc, 'message', exc))[:300]}")
    if not isinstance(got, dict) or got.get("status") not in _STATUSES:
        status = got.get("status") if isinstance(got, dict) else None
        return answer("inconclusive", f"the readback answered {str(status)[:80]!r}, not one of {', '.join(_STATUSES)}")
    status = got["status"]
    reason = str(got.get("reason") or "")[:2000] or f"the tool's readback says {status}"
    if status == "partial" and not step.idempotent:
        return answer("inconclusive", f"{reason} (partial, and the step is not idempotent: running it again could repeat its effect)",
                      got.get("observed"))
    return answer(status, reason, got.get("observed"))


def _check_readback_binding(step: StepSpec, readback: Mapping[str, Any]) -> None:
    if readback.get("step") != step.name or readback.get("kind") != step.kind or readback.get("v") != RECONCILIATION_VERSION:
        raise PlanInvalid(
            f"readback metadata is for step {readback.get('step')!r} ({readback.get('kind')!r}, v{readback.get('v')}), "
            f"not step {step.name!r} ({step.kind})"
        )


def reconcile_readback(catalog: Catalog, step: StepSpec, readback: Mapping[str, Any]) -> dict[str, Any]:
    """The oracle's answer for saved ``readback`` metadata (read-only; see the module docstring)."""
    _check_readback_binding(step, readback)
    if not readback.get("reconcilable"):
        return {"step": step.name, "status": "inconclusive", "observed": {}, "reason": "this step declares no readback"}
    if step.kind == "write_file":
        expected, prior = readback.get("expected_sha256"), readback.get("prior_sha256")
        try:
            real, rel = check_step_path(catalog, step, str(readback.get("path")), None)
            current = _sha_or_none(real)
        except PathOutsideGrant as exc:
            return {"step": step.name, "status": "inconclusive", "observed": {"error": exc.message}, "reason": "the path cannot be read back safely"}
        observed = {"path": rel, "sha256": current, "expected_sha256": expected, "prior_sha256": prior}
        if current == expected:
            reason = "the file holds the intended content"
            if expected == prior:
                reason += " (which it also held before: the write is indistinguishable, the outcome is the same)"
            return {"step": step.name, "status": "applied", "observed": observed, "reason": reason}
        if current == prior:
            what = "is still absent" if prior is None else "still holds its prior content"
            return {"step": step.name, "status": "not_applied", "observed": observed, "reason": f"the file {what}"}
        return {"step": step.name, "status": "inconclusive", "observed": observed,
                "reason": "the file holds neither the intended nor the prior content (changed by something else)"}
    # command with a readback
    before = readback.get("before") or {}
    now = fingerprint(catalog.workspace, readback.get("patterns") or [])
    d = diff_fingerprints(before, now)
    observed = {"diff": {k: v[:100] for k, v in d.items()}, "files": len(now)}
    changed = any(d.values())
    if changed and readback.get("idempotent"):
        # changed files do not say the run finished: it may have stopped half way.
        # The step is idempotent, so the way to a known state is to run it again.
        return {"step": step.name, "status": "partial", "observed": observed,
                "reason": "the readback files changed, but the run may have stopped half way; "
                "the step is idempotent: run it again to finish it"}
    if changed:
        return {"step": step.name, "status": "inconclusive", "observed": observed,
                "reason": "the readback files changed, but the command may have been interrupted half way"}
    if readback.get("changes_on_apply"):
        return {"step": step.name, "status": "not_applied", "observed": observed,
                "reason": "the readback files are unchanged and the catalog says the command always changes them"}
    return {"step": step.name, "status": "inconclusive", "observed": observed,
            "reason": "the readback files are unchanged, which does not prove the command did not run"}


# -- command execution ------------------------------------------------------------------


class _Capture:
    """One output stream: spooled to disk past 1 MiB, hashed, capped, with a short tail."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.file = tempfile.SpooledTemporaryFile(max_size=1024 * 1024)
        self.h = hashlib.sha256()
        self.size = 0
        self.seen = 0
        self.tail = b""

    def feed(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        room = self.limit - self.size
        if room > 0:
            keep = chunk[:room]
            self.file.write(keep)
            self.h.update(keep)
            self.size += len(keep)
        self.tail = (self.tail + chunk)[-TAIL_BYTES:]

    @property
    def truncated(self) -> bool:
        return self.seen > self.size


async def _pump(stream: anyio.abc.ByteReceiveStream | None, cap: _Capture) -> None:
    if stream is None:
        return
    try:
        async for chunk in stream:
            cap.feed(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _store_stream(store: Any, cap: _Capture, scope: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifact_id": None,
        "sha256": "sha256:" + cap.h.hexdigest(),
        "size": cap.size,
        "truncated": cap.truncated,
        "tail": cap.tail.decode("utf-8", "replace"),
    }
    if cap.size == 0:  # nothing to read back: no artifact (artifact_id stays null)
        cap.file.close()
        return out
    cap.file.seek(0)
    try:
        ref = await store.put(cap.file, media_type="text/plain", scope=scope)
        out["artifact_id"] = ref.id
    except Exception as exc:  # quota exhausted or store broken: the command's evidence stands
        out["artifact_error"] = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
    finally:
        cap.file.close()
    return out


async def run_command(
    catalog: Catalog, step: StepSpec, params: Mapping[str, Any], ctx: Any, *, store: Any, capture_limit: int = DEFAULT_CAPTURE_LIMIT
) -> dict[str, Any]:
    """Run a ``command`` step as a subprocess and return its evidence (see the module docstring)."""
    try:
        argv = step.expand_argv(params)
        cwd_real, _ = (catalog.workspace, ".") if step.cwd in (".", "") else resolve_in_workspace(catalog.workspace, step.cwd, what="cwd")
    except WorkError as exc:
        raise _refuse(exc) from None
    if not os.path.isdir(cwd_real):
        raise ToolError(f"step {step.name!r}: cwd {step.cwd!r} is not a directory", code="plan_invalid", effect_happened=False)
    env = {k: os.environ[k] for k in step.env if k in os.environ}
    env.update(dict(step.env_set))
    grant = _work(ctx)
    scope = grant.artifact_scope
    if grant.operation_id is not None:
        env[MARKER_ENV] = grant.operation_id
    on_spawn = grant.on_spawn
    out, err = _Capture(capture_limit), _Capture(capture_limit)
    t0 = time.monotonic()
    try:
        proc = await anyio.open_process(
            argv, cwd=str(cwd_real), env=env, stdin=subprocess.DEVNULL, start_new_session=True
        )
    except OSError as exc:
        raise ToolError(
            f"step {step.name!r}: cannot start {argv[0]!r}: {exc.strerror or exc}",
            code="command_not_started", effect_happened=False, details={"argv": argv},
        ) from None
    timed_out = False
    cancelled_exc = anyio.get_cancelled_exc_class()
    try:
        if callable(on_spawn):
            try:
                await on_spawn(proc.pid)
            except Exception:
                # its process group could not be recorded: stop it now rather than
                # leave a command nobody can later prove finished
                _killpg(proc.pid, signal.SIGKILL)
                with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
                    await proc.wait()
                raise
        async with proc:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_pump, proc.stdout, out)
                tg.start_soon(_pump, proc.stderr, err)
                done = anyio.Event()
                tg.start_soon(_report_progress, ctx, step, t0, out, err, done)
                with anyio.move_on_after(step.timeout_s) as sc:
                    await proc.wait()
                if sc.cancelled_caught:
                    timed_out = True
                    _killpg(proc.pid, signal.SIGTERM)
                    with anyio.move_on_after(TERM_GRACE_S):
                        await proc.wait()
                    _killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
                # Whatever the command left behind in its group dies with it, so the pipes close.
                _killpg(proc.pid, signal.SIGKILL)
                done.set()
                # A grandchild that escaped the group (setsid) may still hold a pipe:
                # stop reading after a grace period instead of hanging.
                tg.cancel_scope.deadline = anyio.current_time() + 5.0
    except cancelled_exc:
        with anyio.CancelScope(shield=True):
            _killpg(proc.pid, signal.SIGKILL)
            with anyio.move_on_after(5.0):
                await proc.wait()
            out.file.close()
            err.file.close()
        raise
    rc = proc.returncode
    duration_ms = int((time.monotonic() - t0) * 1000)
    exit_code = rc if rc is not None and rc >= 0 else None
    sig = -rc if rc is not None and rc < 0 else None
    return {
        "step": step.name,
        "argv": argv,
        "cwd": step.cwd,
        "exit_code": exit_code,
        "signal": sig,
        "timed_out": timed_out,
        "passed": exit_code == 0 and not timed_out,
        "duration_ms": duration_ms,
        "stdout": await _store_stream(store, out, scope),
        "stderr": await _store_stream(store, err, scope),
    }


async def _report_progress(ctx: Any, step: StepSpec, t0: float, out: _Capture, err: _Capture, done: anyio.Event) -> None:
    total = float(step.timeout_s)
    try:
        await ctx.report_progress(0.0, total, f"{step.name}: started")
        while not done.is_set():
            with anyio.move_on_after(PROGRESS_INTERVAL_S):
                await done.wait()
            if done.is_set():
                break
            el = time.monotonic() - t0
            await ctx.report_progress(min(el, total), total, f"{step.name}: running {el:.0f}s, {out.seen + err.seen} bytes of output")
        await ctx.report_progress(total, total, f"{step.name}: finished")
    except Exception:  # a gone client must not break the step
        return


# -- file steps ------------------------------------------------------------------


def _write_file_sync(catalog: Catalog, step: StepSpec, params: Mapping[str, Any], granted: list[str]) -> dict[str, Any]:
    data = _decode_content(step, params)
    real, rel = check_step_path(catalog, step, params["path"], granted)
    prior = _sha_or_none(real)
    write_atomically(real, data)
    sha = "sha256:" + hashlib.sha256(data).hexdigest()
    return {"step": step.name, "path": rel, "sha256": sha, "size": len(data), "prior_sha256": prior, "changed": prior != sha}


async def _read_file(catalog: Catalog, step: StepSpec, params: Mapping[str, Any], ctx: Any, store: Any) -> dict[str, Any]:
    def read() -> tuple[str, bytes]:
        real, rel = check_step_path(catalog, step, params["path"], _granted_paths(ctx))
        try:
            dfd = _open_dir_chain(real.parent, create=False)
            try:
                fd = open_regular(real.name, dir_fd=dfd)
            finally:
                os.close(dfd)
        except FileNotFoundError:
            raise PlanInvalid(f"step {step.name!r}: {rel!r} does not exist", details={"path": rel}) from None
        except IsADirectoryError:
            raise PlanInvalid(f"step {step.name!r}: {rel!r} is a directory", details={"path": rel}) from None
        except OSError as exc:  # a FIFO, socket or device; or a symlink swapped in (ELOOP)
            raise PlanInvalid(f"step {step.name!r}: {rel!r} cannot be read as a regular file ({exc.strerror})", details={"path": rel}) from None
        with os.fdopen(fd, "rb") as f:
            data = f.read(step.max_bytes + 1)
        if len(data) > step.max_bytes:
            raise PlanInvalid(
                f"step {step.name!r}: {rel!r} is larger than the catalog's max_bytes {step.max_bytes}",
                details={"path": rel, "max_bytes": step.max_bytes},
            )
        return rel, data

    try:
        rel, data = await anyio.to_thread.run_sync(read)
    except WorkError as exc:
        raise _refuse(exc) from None
    out: dict[str, Any] = {"step": step.name, "path": rel, "sha256": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
    text: str | None = None
    if len(data) <= INLINE_READ_BYTES:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    if text is not None:
        out["content"] = text
    else:
        ref = await store.put(data, media_type="application/octet-stream", scope=_work(ctx).artifact_scope)
        out["artifact_id"] = ref.id
    return out


# -- tool construction -------------------------------------------------------------


def _step_tool(catalog: Catalog, step: StepSpec, store: Any, capture_limit: int) -> ToolDefinition:
    meta = {"dev.openfunctions/step": {"name": step.name, "kind": step.kind, "catalog_digest": catalog.digest}}
    capability = {
        "effect": step.effect,
        "parallel_safe": step.effect == "read",
        "idempotent": step.idempotent,
        "requires_verification": False,
    }
    annotations = {
        "title": step.name,
        "read_only_hint": step.effect == "read",
        "destructive_hint": step.kind == "write_file" or (step.effect != "read" and not step.idempotent),
        "idempotent_hint": step.idempotent,
        "open_world_hint": step.effect == "external",
    }
    if step.kind == "command":

        async def handler(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return await run_command(catalog, step, params, ctx, store=store, capture_limit=capture_limit)

        out_schema = COMMAND_OUTPUT_SCHEMA
    elif step.kind == "write_file":

        async def handler(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
            try:
                granted = _granted_paths(ctx)
                return await anyio.to_thread.run_sync(_write_file_sync, catalog, step, params, granted)
            except WorkError as exc:
                raise _refuse(exc) from None

        out_schema = WRITE_OUTPUT_SCHEMA
    elif step.kind == "read_file":

        async def handler(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return await _read_file(catalog, step, params, ctx, store)

        out_schema = READ_OUTPUT_SCHEMA
    else:

        async def handler(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
            files = await anyio.to_thread.run_sync(fingerprint, catalog.workspace, step.paths)
            return {"step": step.name, "files": files, "count": len(files), "digest": digest(files)}

        out_schema = FINGERPRINT_OUTPUT_SCHEMA
    return define_tool(
        name=step.tool_name,
        description=step.description,
        input_schema=step.params_schema,
        handler=handler,
        output_schema=out_schema,
        title=step.name,
        tags=("work-step", step.kind),
        annotations=annotations,
        meta=meta,
        capability=capability,
    )


def _oracle_tool(catalog: Catalog, step: StepSpec, bound: ToolDefinition | None = None) -> ToolDefinition:
    async def handler(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        try:
            if bound is not None:
                return await reconcile_tool_effect(step, bound, params["readback"])
            return await anyio.to_thread.run_sync(reconcile_readback, catalog, step, params["readback"])
        except WorkError as exc:
            raise _refuse(exc) from None

    assert step.oracle_name is not None
    return define_tool(
        name=step.oracle_name,
        description=f"Read back whether an uncertain run of step {step.name!r} took effect (read-only).",
        input_schema=ORACLE_INPUT_SCHEMA,
        handler=handler,
        output_schema=ORACLE_OUTPUT_SCHEMA,
        title=f"oracle for {step.name}",
        tags=("work-oracle", step.kind),
        annotations={"read_only_hint": True, "idempotent_hint": True, "open_world_hint": False},
        meta={"dev.openfunctions/oracle": {"step": step.name, "catalog_digest": catalog.digest}},
        capability={"effect": "read", "parallel_safe": True, "idempotent": True},
    )


_EFFECT_RANK = {"read": 0, "write": 1, "external": 2}


def bind_tool(catalog: Catalog, step: StepSpec, tools: Any) -> ToolDefinition:
    """The registered tool a ``tool`` step runs; :class:`CatalogInvalid` (file, step, field) if it cannot be bound.

    ``tools`` is a :class:`~openfunctions.core.ToolRegistry` or a mapping of
    name to :class:`ToolDefinition`. Refused: a tool that is not registered,
    one whose capability declares a wider effect than the step (the catalog
    would understate what the agent can do), and a step declaring
    ``reconcile = true`` for a tool whose capability binds no readback.
    """
    source = str(catalog.path) if catalog.path else "<catalog>"

    def fail(msg: str, field_: str) -> CatalogInvalid:
        return CatalogInvalid(f"catalog {source!r}, step {step.name!r}, field {field_!r}: {msg}",
                              details={"file": source, "step": step.name, "field": field_})

    assert step.tool is not None
    found: ToolDefinition | None
    if isinstance(tools, Mapping):
        found = cast("ToolDefinition | None", tools.get(step.tool))
    else:
        found = tools.get(step.tool) if tools is not None and step.tool in tools else None
    if found is None:
        raise fail(f"tool {step.tool!r} is not registered (serve it beside the work profile, e.g. --profile all "
                   "with --module, or pass it in the registry given to build_work_profile)", "tool")
    cap = found.capability
    if cap is not None and cap.effect is not None and _EFFECT_RANK[cap.effect] > _EFFECT_RANK[step.effect]:
        raise fail(f"tool {step.tool!r} declares effect {cap.effect!r}, wider than the step's {step.effect!r}", "effect")
    if step.reconcilable and (cap is None or not cap.reconcilable):
        raise fail(f"tool {step.tool!r} binds no readback (its capability has no prepare_reconciliation/"
                   "reconcile_effect); set reconcile = false or add the binding", "reconcile")
    return found


def create_step_tools(
    catalog: Catalog, *, store: Any, include_oracles: bool = True, capture_limit: int = DEFAULT_CAPTURE_LIMIT,
    tools: Any = None,
) -> list[ToolDefinition]:
    """One ``of_step.<name>`` tool per catalog step, plus ``of_oracle.<name>`` for reconcilable steps.

    ``store`` is the :class:`~openfunctions.artifacts.ArtifactStore` that
    receives command output and large reads. A ``tool`` step gets no
    ``of_step`` tool (it runs the registered tool it names, looked up in
    ``tools``: a registry or a name -> definition mapping; see
    :func:`bind_tool`), only its oracle when it is reconcilable. Register the
    result in the controller's internal registry (never on an MCP server).
    """
    steps = [s for _, s in sorted(catalog.steps.items())]
    bound = {s.name: bind_tool(catalog, s, tools) for s in steps if s.kind == "tool"}
    out = [_step_tool(catalog, s, store, capture_limit) for s in steps if s.kind != "tool"]
    if include_oracles:
        out += [_oracle_tool(catalog, s, bound.get(s.name)) for s in steps if s.reconcilable]
    return out


__all__ = [
    "bind_tool",
    "create_step_tools",
    "prepare_tool_reconciliation",
    "reconcile_tool_effect",
    "prepare_reconciliation",
    "reconcile_readback",
    "check_step_path",
    "run_command",
    "write_atomically",
    "COMMAND_OUTPUT_SCHEMA",
    "WRITE_OUTPUT_SCHEMA",
    "READ_OUTPUT_SCHEMA",
    "FINGERPRINT_OUTPUT_SCHEMA",
    "ORACLE_OUTPUT_SCHEMA",
]
