"""``create_artifact_read_tool``: bounded, read-only access to a store by opaque id.

The tool is a plain registry tool (it runs through the executor like every
other call): read-only, parallel-safe, idempotent. A call returns at most
16 KiB of content as base64 with the chunk's position and the artifact's
digest, so a model can page through a large artifact and check what it got.

``allow(info, ctx)`` is the host's visibility check (the work profile passes
one that admits only the current attempt's and saved previews' scopes). It
sees the artifact's index record and the trusted execution context -- never
the tool arguments alone. An id it refuses gets exactly the error an unknown
id gets, so a caller cannot probe for ids it may not see.
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from openfunctions.core import ToolDefinition, ToolError, ToolExecutionContext, define_tool

from ._checks import MAX_READ_BYTES
from ._ids import not_found
from ._protocol import ArtifactStoreProtocol
from ._refs import ArtifactInfo
from .errors import ArtifactCorrupt, ArtifactError

log = structlog.get_logger("openfunctions.artifacts.tool")

AllowFn = Callable[[ArtifactInfo, ToolExecutionContext], bool | Awaitable[bool]]

# Long enough for any id and short enough that a hostile one cannot bloat logs.
MAX_ID_CHARS = 256

# Hand-written rather than @tool: a public constant that other artifact read tools (work's) serve as well.
READ_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_ID_CHARS,
            "description": "The opaque artifact id (art_...) from a tool reply's artifactProjection or ArtifactRef.",
        },
        "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Byte offset to start at."},
        "length": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_READ_BYTES,
            "default": MAX_READ_BYTES,
            "description": f"Bytes to read, at most {MAX_READ_BYTES}.",
        },
    },
    "required": ["artifact_id"],
    "additionalProperties": False,
}

READ_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact_id": {"type": "string"},
        "offset": {"type": "integer", "minimum": 0},
        "length": {"type": "integer", "minimum": 0, "maximum": MAX_READ_BYTES},
        "total_size": {"type": "integer", "minimum": 0},
        "sha256": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
        "eof": {"type": "boolean"},
        "data_base64": {"type": "string", "maxLength": 4 * ((MAX_READ_BYTES + 2) // 3)},
        "media_type": {"type": "string"},
        "read_with": {"type": "string", "description": "The tool that reads this artifact: call it for the next chunk."},
    },
    "required": ["artifact_id", "offset", "length", "total_size", "sha256", "eof", "data_base64", "media_type",
                 "read_with"],
    "additionalProperties": False,
}

DEFAULT_NAME = "of_artifact_read"
DEFAULT_SOURCE = "this server's artifact store (<data-dir>/artifacts)"
DESCRIPTION_TEMPLATE = (
    "Read part of an artifact (a large output kept aside) from {source}, by its opaque id. "
    "Use it for ids that come with read_with: \"{name}\"; an id named with another read_with lives in another "
    "store and reads as unknown here. "
    f"Returns at most {MAX_READ_BYTES} bytes as base64 starting at `offset`, with `total_size`, "
    "the artifact's `sha256` and `eof`. To read everything, call again with offset += length until eof is true. "
    "Content is verified against its SHA-256 before any byte is returned."
)
DESCRIPTION = DESCRIPTION_TEMPLATE.format(source=DEFAULT_SOURCE, name=DEFAULT_NAME)


def create_artifact_read_tool(
    store: ArtifactStoreProtocol,
    name: str = DEFAULT_NAME,
    allow: AllowFn | None = None,
    *,
    title: str | None = None,
    source: str | None = None,
    description: str | None = None,
    tags: tuple[str, ...] = ("artifacts",),
) -> ToolDefinition:
    """A registry tool reading ``store`` in verified chunks of at most 16 KiB.

    ``allow(info, ctx) -> bool`` (sync or async) decides whether the caller
    may see an artifact; a refusal reads as an unknown id. Only a literal
    ``True`` admits; an ``allow`` that raises refuses (and is logged).

    Two read tools in one server (``of_artifact_read`` and a layer's own) read
    different stores, so each says which: ``source`` names the store in the
    description (default: the server's ``<data-dir>/artifacts``) and the
    default ``title`` carries the tool name when it is not the default one.
    Every reply names the tool again as ``read_with``, and
    :func:`~openfunctions.artifacts.project_reply` puts the same hint next to
    the artifact ids it returns.
    """
    if title is None:
        title = "Read artifact" if name == DEFAULT_NAME else f"Read artifact ({name})"
    if description is None:
        description = DESCRIPTION_TEMPLATE.format(source=source or DEFAULT_SOURCE, name=name)

    async def read_artifact(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        artifact_id = params["artifact_id"]
        try:
            info = await store.stat(artifact_id)
        except ArtifactCorrupt as exc:
            # A damaged index record cannot be scope-checked; saying "corrupt"
            # would confirm to a caller who may not see it that the id exists.
            raise _tool_error(not_found(artifact_id) if allow is not None else exc) from None
        except ArtifactError as exc:
            raise _tool_error(exc) from None
        if allow is not None and not await _allowed(allow, info, ctx):
            raise _tool_error(not_found(artifact_id))
        try:
            chunk = await store.read(
                info.id, offset=params.get("offset", 0), length=params.get("length", MAX_READ_BYTES)
            )
        except ArtifactError as exc:
            raise _tool_error(exc) from None
        return {
            "artifact_id": chunk.artifact_id,
            "offset": chunk.offset,
            "length": chunk.length,
            "total_size": chunk.total_size,
            "sha256": chunk.sha256,
            "eof": chunk.eof,
            "data_base64": base64.b64encode(chunk.data).decode("ascii"),
            "media_type": chunk.media_type,
            "read_with": name,
        }

    return define_tool(
        name=name,
        title=title,
        description=description,
        input_schema=READ_INPUT_SCHEMA,
        output_schema=READ_OUTPUT_SCHEMA,
        handler=read_artifact,
        tags=tags,
        annotations={
            "title": title,
            "read_only_hint": True,
            "destructive_hint": False,
            "idempotent_hint": True,
            "open_world_hint": False,
        },
        capability={"effect": "read", "parallel_safe": True, "idempotent": True},
    )


async def _allowed(allow: AllowFn, info: ArtifactInfo, ctx: ToolExecutionContext) -> bool:
    # Fail closed: only a literal True admits; a check that raises refuses
    # (and is logged: a broken scope check should be noticed, not obeyed).
    try:
        verdict = allow(info, ctx)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        log.warning("artifact_allow_failed", artifact_id=info.id, exception=type(exc).__name__, error=str(exc))
        return False
    return verdict is True


def _tool_error(exc: ArtifactError) -> ToolError:
    # Reads change nothing, so every failure is known to have had no effect.
    return ToolError(exc.message, code=exc.code, effect_happened=False, details=exc.details)


__all__ = ["create_artifact_read_tool", "READ_INPUT_SCHEMA", "READ_OUTPUT_SCHEMA", "AllowFn", "MAX_ID_CHARS"]
