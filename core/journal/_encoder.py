"""Encoding: the canonical header line, the canonical v2 record line, the chain.

Journal file format, version 2 (written once, here; docs/formats/journal.md
covers the file's life -- companion files, durability, segments, invariants --
and points here for the bytes)
============================================================================

A journal is a UTF-8 text file of newline-terminated lines. **The newline
is the commit marker**: a line without its ``\\n`` was never acknowledged.
Every line is canonical JSON (``openfunctions.core._canonical``: keys sorted,
no whitespace, non-ASCII kept, finite numbers only).

Line 1, the header::

    {"created":"2026-11-30T02:50:00.000000Z","format":"openfunctions.journal",
     "journal_id":"jnl_…","kind":"execution","meta":{},"salt":"<32 hex>","version":2}

- ``format``: always ``"openfunctions.journal"``.
- ``version``: ``2`` for files created by this code (``1`` for older files).
- ``journal_id``: opaque random id, ``jnl_`` + 32 lowercase hex chars (128
  bits from the OS CSPRNG; ``openfunctions.core.new_id``).
- ``kind``: what the journal holds, named by its owner, who also defines its
  record types and documents them: ``"execution"`` (``core/journal/_execution.py``),
  ``"attempt"`` (work attempts, ``work/_custody.py``), ``"grants"``
  (``work/_grants.py``), ``"work-resolutions"`` (``work/_records.py``),
  ``"tasks"`` (``servers/_task_records.py``), ``"runs"`` (``agents/_records.py``),
  ``"workflow-run"`` (``workflows/_runlog.py``), ``"store"`` (``store/_local.py``);
  ``"log"`` when an opener names none. An open that asks for another kind
  than the file's is refused (``journal_mismatch``).
- ``meta``: a JSON object of the owner's facts (e.g. the attempt id); may be ``{}``.
  A file that continues a finished segment (``JournalLog.rotate``) also has
  ``meta.previous``: ``{"file", "journal_id", "last_seq", "last_link"}`` of the
  segment it follows (``<path>.seg-NNNNNN``, a complete journal of its own).
- ``salt``: 128 random bits as 32 lowercase hex digits (the epoch). It enters
  the chain through the first record's ``prev``, so records copied from one
  journal into another do not verify.
- ``created``: RFC 3339 UTC time with microseconds.

Lines 2…, one record each (v2)::

    {"chk":"<32 hex>","data":{…},"prev":"<32 hex>","seq":1,"time":"…","type":"start"}

- ``seq``: integer, ``1`` for the first record, then contiguous (+1 each).
- ``type``: non-empty string naming the record kind (owners define them).
- ``time``: RFC 3339 UTC time the record was appended.
- ``data``: a JSON object, the payload.
- ``prev``: the previous line's link: the previous record's ``chk`` if it is
  a v2 record, else ``link(previous line)`` — for the header or a v1 record —
  where ``link(bytes) = sha256(bytes without the newline).hexdigest()[:32]``.
- ``chk``: ``sha256(body).hexdigest()[:32]``, where ``body`` is the canonical
  JSON of the record *without* ``chk``. Because ``chk`` sorts first, a line is
  exactly ``{"chk":"<32 hex>",`` followed by ``body`` without its ``{``; the
  checksum therefore covers every other byte of the line.

Version 1 (read, never written): the header has ``"version":1`` and no
``salt`` (or there is no header and line 1 is the first record); records are
``{"data":…,"seq":…,"time":…,"type":…}`` with no ``chk``/``prev``. A file
may hold v1 records followed by v2 records (an upgraded file), never a v1
record after a v2 one. Before the first v2 record is written onto a v1 file,
its bytes are copied to ``<path>.pre-v2`` (0600, fsynced); a downgrade to v1
software must restore that copy (records appended since are lost to it).

Why SHA-256 and not CRC32C: it is in the standard library (no compiled
dependency; there is no well-kept CRC32C wheel in this environment), it is
fast (OpenSSL, SHA-NI) next to JSON parsing, which dominates a scan, and
with the chain it is also tamper-evident. 128 bits are kept to keep lines short.
"""

from __future__ import annotations

import json
import os
from hashlib import sha256
from json.encoder import encode_basestring as _encode_str
from typing import Any

from .._canonical import canonical_bytes, canonical_json, to_utf8
from ._record import CURRENT_VERSION, FORMAT_NAME, Header

CHK_LEN = 32
# A v2 line starts with exactly this prefix, then CHK_LEN hex digits, then '",'.
CHK_PREFIX = b'{"chk":"'
BODY_START = len(CHK_PREFIX) + CHK_LEN + 2


def link(line: bytes) -> str:
    """The chain link of a header or v1 line (without its newline)."""
    return sha256(line).hexdigest()[:CHK_LEN]


def new_salt() -> str:
    return os.urandom(16).hex()


def encode_header(header: Header) -> bytes:
    """The header line, newline included."""
    obj: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": header.version,
        "journal_id": header.journal_id,
        "kind": header.kind,
        "created": header.created,
        "meta": header.meta,
    }
    if header.salt is not None:
        obj["salt"] = header.salt
    return canonical_bytes(obj) + b"\n"


def encode_record(
    seq: int, type: str, time: str, data: dict[str, Any] | None, prev: str, data_text: str | None = None
) -> tuple[bytes, str]:
    """The v2 record line (newline included) and its checksum.

    Raises ``NonJsonValue`` (naming the path) if ``data`` has no JSON form.
    ``prev`` must be a link (32 hex digits) and ``seq`` an int: the caller,
    the log, makes both; ``type`` and ``time`` are escaped like any string.

    ``data_text``, if given, is ``canonical_json(data)`` already computed (e.g.
    ``Receipt.canonical_json()``, reused for the reply); ``data`` is then not
    encoded again and may be ``None``. The line is the same bytes either way (a
    test pins it). Only canonical text belongs here: the decoder refuses a
    non-canonical line as corrupt.
    """
    # Hand-assembled in canonical key order (data, prev, seq, time, type); equal
    # to canonical_json of the whole dict (pinned by a test) at half the cost:
    # this runs once per append.
    if data_text is None:
        data_text = canonical_json(data)
    body = f'"data":{data_text},"prev":"{prev}","seq":{seq:d},"time":{_encode_str(time)},"type":{_encode_str(type)}}}'
    try:
        raw = body.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate is NonJsonValue naming its path, not a raw UnicodeEncodeError.
        to_utf8(body, {"data": json.loads(data_text) if data is None else data, "type": type, "time": time})
        raise  # pragma: no cover - to_utf8 raised
    # The checksummed body is "{" + raw; the line puts "chk" in front of it.
    chk = sha256(b"{" + raw).hexdigest()[:CHK_LEN]
    return b'{"chk":"%s",%s\n' % (chk.encode("ascii"), raw), chk


def encode_v1_record(seq: int, type: str, time: str, data: dict[str, Any]) -> bytes:
    """A v1 line; only tests and the upgrade path's fixtures write these."""
    return canonical_bytes({"data": data, "seq": seq, "time": time, "type": type}) + b"\n"


__all__ = ["CHK_LEN", "CURRENT_VERSION", "encode_header", "encode_record", "encode_v1_record", "link", "new_salt"]
