"""Index records and reuse keys: their bytes and their checked parsing.

The format (version 1) is written once, at the top of ``_store.py``, the
module that writes these files (docs/formats/artifacts.md points there).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from openfunctions.core import canonical_bytes
from openfunctions.core.errors import NonJsonValue

from ._refs import ArtifactInfo
from .errors import ArtifactCorrupt

FORMAT_VERSION = 1
HEX_RE = re.compile(r"[0-9a-f]{64}")


def key_name(sha: str, scope: str | None, media_type: str) -> str:
    return hashlib.sha256(canonical_bytes({"media_type": media_type, "scope": scope, "sha256": sha})).hexdigest() + ".json"


def key_doc(artifact_id: str) -> bytes:
    return canonical_bytes({"v": 1, "artifact_id": artifact_id})


def _record_fields(info: ArtifactInfo) -> dict[str, Any]:
    return {
        "v": FORMAT_VERSION,
        "artifact_id": info.id,
        "sha256": info.sha256,
        "size": info.size,
        "media_type": info.media_type,
        "scope": info.scope,
        "created_at": info.created_at,
    }


def record_bytes(info: ArtifactInfo) -> bytes:
    fields = _record_fields(info)
    fields["check"] = "sha256:" + hashlib.sha256(canonical_bytes(fields)).hexdigest()
    return canonical_bytes(fields)


def parse_record(artifact_id: str, raw: bytes) -> ArtifactInfo:
    def bad(why: str) -> ArtifactCorrupt:
        return ArtifactCorrupt(f"artifact {artifact_id}: index record is damaged ({why})")

    try:
        doc = json.loads(raw)
    except ValueError:
        raise bad("not JSON") from None
    if not isinstance(doc, dict):
        raise bad("not an object")
    check = doc.pop("check", None)
    try:
        expect = "sha256:" + hashlib.sha256(canonical_bytes(doc)).hexdigest()
    except NonJsonValue:
        raise bad("not canonical JSON") from None
    if check != expect:
        raise bad("checksum mismatch")
    if doc.get("v") != FORMAT_VERSION:
        raise bad(f"unknown version {doc.get('v')!r}")
    try:
        info = ArtifactInfo(
            id=doc["artifact_id"],
            sha256=doc["sha256"],
            size=doc["size"],
            media_type=doc["media_type"],
            scope=doc["scope"],
            created_at=doc["created_at"],
        )
    except KeyError as exc:
        raise bad(f"missing field {exc.args[0]!r}") from None
    if info.id != artifact_id:
        raise bad("it names another artifact")
    if not (isinstance(info.sha256, str) and info.sha256.startswith("sha256:") and HEX_RE.fullmatch(info.sha256[7:])):
        raise bad("bad digest")
    if isinstance(info.size, bool) or not isinstance(info.size, int) or info.size < 0:
        raise bad("bad size")
    return info


__all__ = ["key_name", "key_doc", "record_bytes", "parse_record", "FORMAT_VERSION", "HEX_RE"]
