"""Decoding: stream a journal file, validate every line, locate a torn tail.

Reading is streaming (fixed-size chunks via ``pread``): memory is bounded by
the longest line, not the file. Anything wrong before the tail raises
:class:`JournalCorrupt` naming the byte offset and the 1-based line number
(line 1 is the header).

**Reserved space.** A writer may reserve room ahead of its records (the
execution journal does: ``JournalLog.open(preallocate=True)``), so the file
can end in NUL bytes that no record has reached yet; a record never contains
a NUL byte (JSON text escapes U+0000), so the data ends where that NUL suffix
begins. :func:`data_end` finds that point without reading the suffix; a
suffix of nothing but NUL (and ``\\n``) bytes after the last record is
reported as :attr:`ScanResult.reserved`, not as damage.

Only these shapes count as a *torn tail*, reported in :attr:`ScanResult.torn`
rather than raised (each is what a crash during the last write can leave):

- an unterminated final fragment (no ``\\n`` between its start and the end of
  the data);
- a NUL-filled tail: the data ends inside the failing line and only NUL and
  ``\\n`` bytes follow (a file system that extended the file but never wrote
  the block);
- a torn write into reserved space: NUL bytes *inside* the data after the last
  valid record (the disk persisted a later page of the last write but not an
  earlier one), where that data is at most :data:`TORN_WRITE_MAX` bytes or one
  line, in a file that ends in reserved room: the writer never writes more
  than that between two fsyncs (a longer line goes alone), so more data after
  a hole means acknowledged records were damaged, and that fails closed, as
  does any hole in a file without reserved room.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import JournalCorrupt
from ._encoder import BODY_START, CHK_LEN, CHK_PREFIX, link
from ._record import FORMAT_NAME, TORN_WRITE_MAX, VERSION_V1, VERSION_V2, Header, Record

CHUNK = 1 << 20
_V2_KEYS = frozenset({"chk", "data", "prev", "seq", "time", "type"})
_V1_KEYS = frozenset({"data", "seq", "time", "type"})
_HEX = frozenset("0123456789abcdef")


@dataclass
class TornTail:
    offset: int
    length: int  # to the end of the file: what repair cuts
    reason: str
    data: int  # of those bytes, how many lead up to the last one that is not NUL or newline: what repair keeps a copy of


@dataclass
class ScanResult:
    header: Header | None = None
    header_end: int = 0
    records: int = 0
    v1_records: int = 0
    last_seq: int = 0
    last_link: str = ""
    good_end: int = 0
    torn: TornTail | None = None
    reserved: int = 0  # NUL bytes after the last record: room a writer reserved ahead of its records


def data_end(fd: int, size: int) -> int:
    """Where the data of the file ``fd`` (``size`` bytes) ends: ``size``, or where its NUL suffix starts.

    A binary search over single bytes (about 22 reads for 4 MiB of reserved room), valid because no record
    holds a NUL byte: every byte before the end of the data is not NUL, every byte after it is. In a file a
    crash left with a hole inside its last write the answer is one end of some NUL run; the decoder's tail
    check then judges the rest.
    """
    if size <= 0:
        return 0
    if os.pread(fd, 1, size - 1) not in (b"\0", b""):
        return size
    lo, hi = 0, size - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if os.pread(fd, 1, mid) in (b"\0", b""):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_DECODE = _DECODER.decode
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__, not in the stubs


class Decoder:
    """Validate one journal file, yielding records; ``result`` is filled as it goes."""

    def __init__(self, fd: int, path: str, *, limit: int | None = None, writer_gone: bool = False) -> None:
        """``limit``: read only that many bytes (a caller that knows where the durable data ends); by default
        the whole file, its lines read up to :func:`data_end` and the rest checked to be reserved room.

        ``writer_gone``: no writer can be appending (the caller holds the writer lock, or saw it free), so data
        found past the end of the data can only be a hole in the last write or damage, and damage raises. A
        lock-free reader next to a live writer (the default) takes such data for an append that landed after
        it found the end, and stops before it, as before any torn tail."""
        self.fd = fd
        self.path = path
        self.writer_gone = writer_gone
        self.size = os.fstat(fd).st_size if limit is None else limit
        self.limit = self.size if limit is not None else data_end(fd, self.size)
        self.result = ScanResult()

    # -- errors ---------------------------------------------------------
    def _corrupt(self, offset: int, lineno: int, reason: str) -> JournalCorrupt:
        return JournalCorrupt(
            f"journal {self.path!r} is corrupt at byte offset {offset} (line {lineno}): {reason}",
            details={"path": self.path, "offset": offset, "line": lineno, "reason": reason},
        )

    # -- lines ----------------------------------------------------------
    def _lines(self) -> Iterator[tuple[int, bytes, bool]]:
        """(offset, line without newline, terminated) for each line up to ``limit``."""
        pos = 0
        buf = b""
        buf_start = 0
        while pos < self.limit:
            chunk = os.pread(self.fd, min(CHUNK, self.limit - pos), pos)
            if not chunk:
                break
            pos += len(chunk)
            buf = buf + chunk if buf else chunk
            parts = buf.split(b"\n")
            buf = parts.pop()  # the unterminated remainder (maybe empty)
            off = buf_start
            for line in parts:
                yield off, line, True
                off += len(line) + 1
            buf_start = off
        if buf:
            yield buf_start, buf, False

    def _data_extent(self, offset: int) -> int:
        """One past the last byte in ``[offset, size)`` that is neither NUL nor newline (``offset`` if none):
        read backwards from the end, so reserved room costs one read per :data:`CHUNK`."""
        pos = self.size
        while pos > offset:
            start = max(offset, pos - CHUNK)
            kept = os.pread(self.fd, pos - start, start).rstrip(b"\0\n")
            if kept:
                return start + len(kept)
            pos = start
        return offset

    def _tail(self, offset: int, line: bytes, terminated: bool) -> TornTail | None:
        """What the bytes from ``offset`` (a line that did not validate, or the end of the data) to the end of
        the file are: ``None`` for reserved room (nothing but NUL and newlines), a :class:`TornTail` for a
        shape a crash during the last write can leave (see the module doc), ``_DAMAGED`` for anything else
        (:meth:`_settle` raises: that is corruption)."""
        end = self._data_extent(offset)
        if end == offset:
            return None
        length = self.size - offset
        if end <= offset + len(line) and (not terminated or b"\0" in line):
            reason = "NUL-filled tail" if b"\0" in line else "unterminated final fragment"
            return TornTail(offset, length, reason, end - offset)
        # A hole (NUL) inside data no longer than one write, or than one line, in a file that ends in reserved
        # room: a torn last write. (A file that grows by appending is extended only after its data is written.)
        if os.pread(self.fd, 1, self.size - 1) != b"\0":
            return _DAMAGED
        one_write = end - offset <= TORN_WRITE_MAX
        nul = False
        pos = offset
        while pos < end:
            chunk = os.pread(self.fd, min(CHUNK, end - pos), pos)
            if not chunk:
                break
            nul = nul or b"\0" in chunk
            if not one_write and b"\n" in (chunk if pos + len(chunk) < end else chunk[:-1]):
                return _DAMAGED  # more than one line, more than one write: acknowledged records were damaged
            if nul and one_write:
                break
            pos += len(chunk)
        if not nul:
            return _DAMAGED
        return TornTail(offset, length, "torn write (NUL bytes inside the last write: a block never written)",
                        end - offset)

    # -- scan -----------------------------------------------------------
    def __iter__(self) -> Iterator[Record]:
        r = self.result
        lineno = 0
        for offset, line, terminated in self._lines():
            lineno += 1
            if lineno == 1:
                if not terminated:
                    raise self._corrupt(offset, 1, "the header line is incomplete (no newline)")
                rec = self._header(line)
                if rec is None:
                    r.header_end = r.good_end = offset + len(line) + 1
                    r.last_link = link(line)
                    continue
                # A headerless v1 file: line 1 is already a record.
            else:
                try:
                    if not terminated:
                        raise self._corrupt(offset, lineno, "the line has no newline")  # judged by _tail below
                    rec = self._record(line, offset, lineno)
                except JournalCorrupt as exc:
                    self._settle(offset, lineno, line, terminated, error=exc, live="unterminated final fragment",
                                 hole="NUL bytes inside the data (a block never written), then more data than one "
                                 "write holds: not a torn write")
                    return
            r.records += 1
            r.last_seq = rec.seq
            r.good_end = offset + len(line) + 1
            yield rec
        if lineno == 0:
            raise self._corrupt(0, 1, "the file is empty (no header line)")
        if self.size > self.limit:  # past the end of the data: reserved room, or a hole in the last write
            self._settle(self.limit, lineno + 1, b"", False, error=None,
                         live="data appended after the end of the data was found (a live writer's)",
                         hole="NUL bytes after the last record, then more data than one write holds: not a torn write")

    def _settle(self, offset: int, lineno: int, line: bytes, terminated: bool, *, error: JournalCorrupt | None,
                live: str, hole: str) -> None:
        """Put in ``result`` what the bytes from ``offset`` (``line``, a line that did not validate, or the end of
        the data) to the end of the file are: reserved room or a torn tail; raise for damage. ``live``: the reason
        a lock-free reader gives what follows an unterminated line (a live writer may have written it since the
        reader found the end). ``hole``: the message for NUL bytes inside more data than one write holds, in a
        file that ends in reserved room; otherwise damage raises ``error``, the line's own (if any)."""
        tail = self._tail(offset, line, terminated)
        if tail is _DAMAGED and not terminated and not self.writer_gone:
            tail = TornTail(offset, self.size - offset, live, self.size - offset)
        if tail is _DAMAGED:
            if error is not None and not (self.size > self.limit and (not terminated or b"\0" in line)):
                raise error
            raise self._corrupt(offset, lineno, hole) from None
        if tail is None:
            self.result.reserved = self.size - offset
        else:
            self.result.torn = tail

    def _parse(self, line: bytes, offset: int, lineno: int) -> dict[str, Any]:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._corrupt(offset, lineno, f"invalid UTF-8 at byte {exc.start} of the line") from None
        try:
            obj = _DECODE(text)
        except ValueError as exc:
            raise self._corrupt(offset, lineno, f"invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise self._corrupt(offset, lineno, "the line is not a JSON object")
        return obj

    def _header(self, line: bytes) -> Record | None:
        obj = self._parse(line, 0, 1)
        r = self.result
        if "format" not in obj and "seq" in obj:
            r.header = Header(version=VERSION_V1, journal_id=None, kind=None, created=None, salt=None)
            return self._record(line, 0, 1)
        if obj.get("format") != FORMAT_NAME:
            raise self._corrupt(0, 1, f"not an {FORMAT_NAME} file (header format is {obj.get('format')!r})")
        version = obj.get("version")
        if version not in (VERSION_V1, VERSION_V2) or isinstance(version, bool):
            raise self._corrupt(0, 1, f"unsupported journal version {version!r} (this software reads 1 and 2)")
        salt = obj.get("salt")
        if version == VERSION_V2 and not (isinstance(salt, str) and len(salt) == CHK_LEN and set(salt) <= _HEX):
            raise self._corrupt(0, 1, "a v2 header needs a 32-hex-digit salt")
        meta = obj.get("meta", {})
        if not isinstance(meta, dict):
            raise self._corrupt(0, 1, "header meta is not an object")
        r.header = Header(
            version=version,
            journal_id=obj.get("journal_id"),
            kind=obj.get("kind"),
            created=obj.get("created"),
            salt=salt if version == VERSION_V2 else None,
            meta=meta,
        )
        return None

    def _record(self, line: bytes, offset: int, lineno: int) -> Record:
        """Validate one record line. The fast path accepts only a fully valid v2
        line; anything else goes to :meth:`_record_checked`, which names the fault."""
        r = self.result
        if line[:8] == CHK_PREFIX and line[40:42] == b'",':
            # The C scanner without JSONDecoder.decode's Python wrapper; a
            # trailing byte after the object sends the line to the slow path.
            try:
                text = line.decode("utf-8")
                obj, end = _SCAN(text, 0)
                if end != len(text):
                    obj = None
            except (ValueError, StopIteration):
                obj = None
            if type(obj) is dict and obj.keys() == _V2_KEYS:
                seq, type_, time_, data, chk, prev = obj["seq"], obj["type"], obj["time"], obj["data"], obj["chk"], obj["prev"]
                if (
                    type(seq) is int
                    and seq == r.last_seq + 1
                    and prev == r.last_link
                    and type(type_) is str
                    and type_
                    and type(time_) is str
                    and type(data) is dict
                    and hashlib.sha256(b"{" + line[BODY_START:]).hexdigest()[:CHK_LEN] == chk
                ):
                    r.last_link = chk
                    return Record(seq, type_, time_, data, chk, prev, VERSION_V2, offset, lineno)
        return self._record_checked(line, offset, lineno)

    def _record_checked(self, line: bytes, offset: int, lineno: int) -> Record:
        r = self.result
        obj = self._parse(line, offset, lineno)
        if "chk" in obj:
            if set(obj) != _V2_KEYS:
                raise self._corrupt(offset, lineno, f"a v2 record has fields {sorted(obj)}, expected {sorted(_V2_KEYS)}")
            if not line.startswith(CHK_PREFIX) or line[BODY_START - 2 : BODY_START] != b'",':
                raise self._corrupt(offset, lineno, "the record is not in canonical form")
            chk = obj["chk"]
            actual = hashlib.sha256(b"{" + line[BODY_START:]).hexdigest()[:CHK_LEN]
            if actual != chk:
                raise self._corrupt(offset, lineno, f"checksum mismatch (stored {chk}, computed {actual})")
            version = VERSION_V2
        else:
            if set(obj) != _V1_KEYS:
                raise self._corrupt(offset, lineno, f"a record has fields {sorted(obj)}, expected {sorted(_V1_KEYS)} (v1) or {sorted(_V2_KEYS)} (v2)")
            if r.records > r.v1_records:  # an earlier record was v2
                raise self._corrupt(offset, lineno, "a record without checksum (v1) follows a v2 record")
            if r.header is not None and r.header.version == VERSION_V2:
                raise self._corrupt(offset, lineno, "a record without checksum (v1) in a v2 journal")
            version = VERSION_V1
        seq, type_, time_, data = obj["seq"], obj["type"], obj["time"], obj["data"]
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise self._corrupt(offset, lineno, f"seq is not an integer: {seq!r}")
        if not isinstance(type_, str) or not type_:
            raise self._corrupt(offset, lineno, "type is not a non-empty string")
        if not isinstance(time_, str):
            raise self._corrupt(offset, lineno, "time is not a string")
        if not isinstance(data, dict):
            raise self._corrupt(offset, lineno, "data is not an object")
        expected = r.last_seq + 1
        if seq != expected:
            what = "duplicate or out-of-order" if seq <= r.last_seq else "gap in"
            raise self._corrupt(offset, lineno, f"{what} seq: found {seq}, expected {expected}")
        if version == VERSION_V2:
            if obj["prev"] != r.last_link:
                raise self._corrupt(offset, lineno, f"broken chain: prev is {obj['prev']!r}, the previous line's link is {r.last_link!r}")
            r.last_link = chk
            return Record(seq, type_, time_, data, chk, obj["prev"], VERSION_V2, offset, lineno)
        r.v1_records += 1
        r.last_link = link(line)
        return Record(seq, type_, time_, data, None, None, VERSION_V1, offset, lineno)


#: :meth:`Decoder._tail`'s answer for damage that is not a torn tail.
_DAMAGED = TornTail(-1, -1, "damaged", -1)


def scan(
    fd: int, path: str, *, limit: int | None = None, on_record: Callable[[Record], None] | None = None,
    writer_gone: bool = False,
) -> ScanResult:
    """Validate the whole file in constant memory; ``on_record`` sees each valid record (``writer_gone``:
    :class:`Decoder`'s)."""
    d = Decoder(fd, path, limit=limit, writer_gone=writer_gone)
    if on_record is None:
        for _ in d:
            pass
    else:
        for rec in d:
            on_record(rec)
    return d.result


__all__ = ["Decoder", "ScanResult", "TornTail", "data_end", "scan"]
