"""A set of things not yet done, with an event for "none left" (running calls, unanswered requests)."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

import anyio

T = TypeVar("T", bound=Hashable)


class Outstanding(Generic[T]):
    """Items added when they start and discarded when they end; ``empty`` is set whenever none are left."""

    def __init__(self) -> None:
        self._items: set[T] = set()
        # anyio events cannot be cleared: a fresh one replaces the set one when
        # the first item arrives, so a waiter always holds the current event.
        self.empty = anyio.Event()
        self.empty.set()

    def add(self, item: T) -> None:
        if not self._items:
            self.empty = anyio.Event()
        self._items.add(item)

    def discard(self, item: T) -> None:
        self._items.discard(item)
        if not self._items:
            self.empty.set()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item: object) -> bool:
        # Without it ``in`` would fall back to ``__iter__``, which copies the set (a per-call cost on stdio).
        return item in self._items

    def __iter__(self) -> Iterator[T]:
        """A snapshot: items may be discarded while the caller iterates."""
        return iter(list(self._items))
