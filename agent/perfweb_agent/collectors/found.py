"""A collector's source: the one it was given (a test's, a recorded capture's), or the
host's own, looked for once on first use — on the sampler thread, so that finding it
(importing psutil, reading /proc) never runs on the user's thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Found(Generic[T]):
    """`get()`: the given source, or what `find()` returned the first time (None: none)."""

    def __init__(self, given: T | None, find: Callable[[], T | None]) -> None:
        self._value = given
        self._find: Callable[[], T | None] | None = None if given is not None else find

    def get(self) -> T | None:
        if self._find is not None:
            self._value, self._find = self._find(), None
        return self._value
