"""The `record_function` scopes open on the training thread while a profiler window records.

A window is recorded in segments (perfweb_agent.runtime.profiler): Kineto is stopped and
started again at a step boundary. That is only safe when no RecordFunction that began under
the stopped segment is still open: when it ends, torch's thread-local exit callback
(`onFunctionExitTLS`, torch 2.13 and main) writes its end time through the pointer it was
given at its start, into the stopped segment's freed records, if a new segment is running
by then (a heap corruption: seen as `free(): invalid next size` when a segment restarted
inside `Optimizer.step`'s scope, where optimizer post-hooks run). With no segment running it
returns early, which is why stopping is always safe.

At a step boundary the scopes still open are Python ones (`torch.autograd.profiler.
record_function`, which `torch.profiler.record_function`, `Optimizer.step`, the DataLoader and
DDP use); aten ops begin and end inside one call. `OpenScopes` counts those that began in
the current segment, on the training thread only, while a window is open (its two wrappers
are installed for the window and removed after), and calls back when the last one closes:
the next segment starts there instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class OpenScopes:
    """Counts record_function scopes of the current segment still open on one thread."""

    def __init__(self, record_function: Any, on_all_closed: Callable[[], None]) -> None:
        self._cls = record_function
        self._on_all_closed = on_all_closed
        self._originals: tuple[Any, Any] | None = None
        self._wrappers: tuple[Any, Any] | None = None
        self._thread: int | None = None
        self._segment = 0
        self._recording = False
        self._tags: dict[int, int] = {}  # id(scope) -> segment it began in
        self._open: dict[int, int] = {}  # segment -> scopes still open
        self._waiting_for: int | None = None
        self.deferred_end = False  # a scope whose end is left to a future (not __exit__)

    def install(self, thread: int) -> None:
        """Wrap record_function's __enter__/__exit__ (for the training thread `thread`)."""
        self._thread = thread
        if self._originals is not None:
            return
        cls = self._cls
        enter, leave = cls.__dict__["__enter__"], cls.__dict__["__exit__"]
        tracker = self

        def __enter__(scope: Any) -> Any:  # noqa: N807 - replaces the dunder
            result = enter(scope)
            if tracker._recording and threading.get_ident() == tracker._thread:
                tracker._began(scope)
            return result

        def __exit__(scope: Any, *exc: Any) -> Any:  # noqa: N807
            try:
                return leave(scope, *exc)
            finally:
                if tracker._tags:
                    tracker._ended(scope)

        self._originals = (enter, leave)
        self._wrappers = (__enter__, __exit__)
        cls.__enter__, cls.__exit__ = __enter__, __exit__

    def uninstall(self) -> None:
        """Put torch's methods back (unless something wrapped them after us)."""
        self._recording = False
        self._waiting_for = None
        if self._originals is None or self._wrappers is None:
            return
        cls = self._cls
        if (cls.__dict__.get("__enter__"), cls.__dict__.get("__exit__")) == self._wrappers:
            cls.__enter__, cls.__exit__ = self._originals
            self._originals = self._wrappers = None
        self._tags.clear()
        self._open.clear()

    def forget(self) -> None:
        """Count nothing and call back never (a forked child); the wrappers stay, inert."""
        self._recording = False
        self._waiting_for = None
        self._tags.clear()
        self._open.clear()

    def segment_started(self) -> None:
        """A segment records from now: scopes beginning now are counted for it."""
        self._segment += 1
        self._recording = True
        self._waiting_for = None
        self.deferred_end = False

    def segment_stopped(self) -> bool:
        """The segment stopped; True if none of its scopes is open (start the next now).

        Otherwise `on_all_closed` is called when the last of them closes.
        """
        self._recording = False
        if self._open.get(self._segment, 0) == 0:
            return True
        self._waiting_for = self._segment
        return False

    def stop_waiting(self) -> None:
        """No next segment is wanted any more (the window ended)."""
        self._waiting_for = None

    def _began(self, scope: Any) -> None:
        self._tags[id(scope)] = self._segment
        self._open[self._segment] = self._open.get(self._segment, 0) + 1

    def _ended(self, scope: Any) -> None:
        segment = self._tags.pop(id(scope), None)
        if segment is None:
            return
        if not getattr(scope, "run_callbacks_on_exit", True):
            self.deferred_end = True  # its RecordFunction ends later, when a future completes
        left = self._open.get(segment, 1) - 1
        if left > 0:
            self._open[segment] = left
            return
        self._open.pop(segment, None)
        if segment == self._waiting_for:
            self._waiting_for = None
            self._on_all_closed()
