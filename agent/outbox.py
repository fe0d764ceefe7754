"""The sender's queue of request bodies: in memory first, spilled to disk when it grows.

Order is the delivery order (start, batches by seq, finish). The oldest envelopes are the
ones spilled, so everything on disk is older than everything in memory and the head of the
queue is always the oldest undelivered envelope: a replay after an outage is in order.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque

from agent import layout
from agent.layout import Envelope
from agent.log import say_once


class Outbox:
    """Bounded FIFO of envelopes with a bounded spill directory behind it."""

    def __init__(
        self,
        *,
        spill_folder: str | None,
        max_memory: int = 32,
        max_spill_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self.spill_folder = spill_folder
        self.max_memory = max_memory
        self.max_spill_bytes = max_spill_bytes
        self._memory: deque[Envelope] = deque()
        self._disk: deque[tuple[str, int, int]] = deque()  # path, size, samples
        self._disk_bytes = 0
        self.dropped_samples = 0

    def __len__(self) -> int:
        return len(self._memory) + len(self._disk)

    @property
    def spilled(self) -> int:
        """Envelopes currently waiting on disk."""
        return len(self._disk)

    def put(self, envelope: Envelope) -> None:
        """Queue an envelope; spill the oldest in memory if memory is full."""
        self._memory.append(envelope)
        while len(self._memory) > self.max_memory:
            self._spill(self._memory.popleft())

    def head(self) -> Envelope | None:
        """The oldest undelivered envelope (read back from disk if it was spilled)."""
        while self._disk:
            path, _, samples = self._disk[0]
            try:
                envelope = layout.read_envelope(path)
            except OSError:
                self._forget_disk_head(dropped=True)
                continue
            envelope.samples = samples
            return envelope
        return self._memory[0] if self._memory else None

    def pop(self, *, delivered: bool = True) -> None:
        """Remove the head; when not delivered (rejected for good), count it as dropped."""
        if self._disk:
            self._forget_disk_head(dropped=not delivered)
        elif self._memory:
            envelope = self._memory.popleft()
            if not delivered:
                self.dropped_samples += envelope.samples
        return None

    def spill_all(self) -> None:
        """Move every in-memory envelope to disk (at exit, when time is up)."""
        while self._memory:
            self._spill(self._memory.popleft())

    def drop_all(self) -> None:
        """Forget everything (the server refused our token: sending is pointless)."""
        while len(self):
            self.pop(delivered=False)

    def remove_empty_folders(self) -> None:
        """Remove this agent's spill folder (and its run folder) if nothing is left in them."""
        if self.spill_folder is None:
            return
        for folder in (self.spill_folder, os.path.dirname(self.spill_folder)):
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # fails, harmlessly, when not empty or not there

    def _forget_disk_head(self, *, dropped: bool) -> None:
        path, size, samples = self._disk.popleft()
        self._disk_bytes -= size
        if dropped:
            self.dropped_samples += samples
        with contextlib.suppress(OSError):
            os.unlink(path)

    def _spill(self, envelope: Envelope) -> None:
        if self.spill_folder is None:
            self.dropped_samples += envelope.samples
            return
        size = len(envelope.gz)
        if self._disk_bytes + size > self.max_spill_bytes and envelope.kind == layout.KIND_BATCH:
            say_once("spill-full", "spill directory is full; dropping the oldest unsent batches")
            self.dropped_samples += envelope.samples
            return
        try:
            path = layout.write_envelope(self.spill_folder, envelope)
        except OSError as exc:
            say_once("spill-error", "cannot spill to %s (%s); dropping", self.spill_folder, exc)
            self.dropped_samples += envelope.samples
            return
        self._disk.append((path, size, envelope.samples))
        self._disk_bytes += size
