"""The one store interface both backends implement, and the checks they share.

A store maps string keys to JSON values. Every entry carries a ``version``:
an integer drawn from one store-wide counter (the local store's revision, a
PostgreSQL sequence), so it only grows, also across a delete and re-create
(no ABA: a compare-and-set never matches a key that was deleted and written
again since it was read). ``expected_version=0`` means "the key must not exist".

Keys and values are checked before anything is written: a key is 1 to
``MAX_KEY_BYTES`` UTF-8 bytes, no NUL (PostgreSQL text cannot hold one), no
lone surrogate; a value must have an exact JSON form (``check_json``) and its
compact JSON text must fit ``max_value_bytes`` (default 1 MiB).
"""

from __future__ import annotations

import abc
import json
import re
from dataclasses import dataclass
from typing import Any

from openfunctions.core import NonJsonValue, check_json

from ._errors import InvalidKey, InvalidValue, StoreUnsafe, ValueTooLarge

MAX_KEY_BYTES = 1024
DEFAULT_MAX_VALUE_BYTES = 1 << 20
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 10_000
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")


@dataclass(frozen=True)
class Entry:
    key: str
    value: Any
    version: int
    updated_at: str  # ISO 8601 UTC


def check_key(key: Any, what: str = "key") -> str:
    if not isinstance(key, str):
        raise InvalidKey(f"{what} must be a string, got {type(key).__name__}")
    if key.isascii() and 0 < len(key) <= MAX_KEY_BYTES and "\x00" not in key:
        return key  # the common case, without encoding the key
    if not key:
        raise InvalidKey(f"{what} must not be empty")
    if "\x00" in key:
        raise InvalidKey(f"{what} {_show(key)} contains a NUL character")
    try:
        n = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidKey(f"{what} {_show(key)} contains a lone surrogate (not valid UTF-8)") from None
    if n > MAX_KEY_BYTES:
        raise InvalidKey(f"{what} is {n} bytes of UTF-8; the limit is {MAX_KEY_BYTES}", details={"bytes": n})
    return key


def check_name(name: Any) -> str:
    """A store's name (both backends; on the local one it is also a directory name)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise StoreUnsafe(f"store name {name!r} is invalid: use 1-64 characters of A-Z a-z 0-9 _ . - "
                          "(not starting with '.' or '-')")
    return name


def check_prefix(prefix: Any) -> str:
    if prefix == "":
        return ""
    return check_key(prefix, "prefix")


def check_list_args(prefix: Any, after: Any, limit: Any) -> tuple[str, str | None, int]:
    """``list``'s arguments, checked the same way on both backends."""
    prefix = check_prefix(prefix)
    if after is not None:
        check_key(after, "after")
    return prefix, after, check_limit(limit)


def prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (None: no bound)."""
    p = prefix.rstrip("\U0010ffff")
    if not p:
        return None
    return p[:-1] + chr(ord(p[-1]) + 1)


def encode_value(value: Any, key: str, max_bytes: int) -> str:
    """The value's compact JSON text, after the JSON and size checks."""
    try:
        check_json(value)
    except NonJsonValue as exc:
        raise InvalidValue(f"value for key {_show(key)} has no JSON form: {exc.message}") from None
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidValue(f"value for key {_show(key)} contains a lone surrogate (not valid UTF-8)") from None
    if size > max_bytes:
        raise ValueTooLarge(
            f"value for key {_show(key)} is {size} bytes as JSON; this store's limit is {max_bytes} "
            "(nothing was written)",
            details={"bytes": size, "limit": max_bytes},
        )
    return text


def check_limit(limit: Any) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1 or limit > MAX_LIST_LIMIT:
        raise InvalidKey(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}, got {limit!r}")
    return limit


def check_version(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InvalidKey(f"expected_version must be an integer >= 0 (0 = the key must not exist), got {v!r}")
    return v


def _show(key: str) -> str:
    return repr(key if len(key) <= 80 else key[:77] + "...")


class Transaction(abc.ABC):
    """Reads and writes that commit together or not at all.

    Use ``async with store.transaction() as tx:``; leaving the block commits,
    an exception rolls back. A commit that lost a race raises :class:`Conflict`
    and wrote nothing: run the whole block again.
    """

    @abc.abstractmethod
    async def get(self, key: str) -> Entry | None: ...

    @abc.abstractmethod
    async def put(self, key: str, value: Any) -> None: ...

    @abc.abstractmethod
    async def delete(self, key: str) -> None: ...


class Store(abc.ABC):
    """The async key-value interface (``open_local_store`` and ``open_pg_store`` return one)."""

    name: str
    backend: str  # "local" | "postgresql"
    max_value_bytes: int

    @abc.abstractmethod
    async def get(self, key: str) -> Entry | None:
        """The entry, or None."""

    @abc.abstractmethod
    async def put(self, key: str, value: Any) -> Entry:
        """Write unconditionally; returns the new entry once it is durable."""

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Delete; True if the key existed."""

    @abc.abstractmethod
    async def compare_and_set(self, key: str, expected_version: int, value: Any) -> Entry:
        """Write only if the key's version is ``expected_version`` (0: absent); else :class:`Conflict`."""

    @abc.abstractmethod
    async def compare_and_delete(self, key: str, expected_version: int) -> None:
        """Delete only if the key's version is ``expected_version``; else :class:`Conflict`."""

    @abc.abstractmethod
    async def list(
        self, prefix: str = "", *, after: str | None = None, limit: int = DEFAULT_LIST_LIMIT, reverse: bool = False
    ) -> list[Entry]:
        """Entries whose key starts with ``prefix``, in key (code point) order, or reversed.

        Pages: pass the last key seen as ``after`` (exclusive, in the
        direction of travel). At most ``limit`` entries (1..10,000).
        """

    @abc.abstractmethod
    def transaction(self) -> Any:
        """An async context manager yielding a :class:`Transaction`."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Return once every write acknowledged so far is durable (a no-op where each write already is)."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["DEFAULT_MAX_VALUE_BYTES", "Entry", "MAX_KEY_BYTES", "Store", "Transaction"]
