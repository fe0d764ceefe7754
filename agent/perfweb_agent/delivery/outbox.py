"""The sender's queue of request bodies: in memory first, spilled to disk when it grows.

Order is the delivery order (start, batches by seq, finish). The oldest envelopes are the
ones spilled, so everything on disk is older than everything in memory and the head of the
queue is always the oldest undelivered envelope: a replay after an outage is in order.

The sampling thread puts, the network thread reads the head and pops; every method holds
one small lock, and none holds it across a network request.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import say_once
from perfweb_agent.delivery import claims
from perfweb_contract import layout
from perfweb_contract.layout import Envelope


class Outbox:
    """Bounded FIFO of envelopes with a bounded spill directory behind it."""

    def __init__(
        self,
        *,
        spill_folder: str | None,
        max_memory: int = 32,
        max_spill_bytes: int = 256 * 1024 * 1024,
        destination: dict[str, str] | None = None,
    ) -> None:
        self.spill_folder = spill_folder
        self.max_memory = max_memory
        self.max_spill_bytes = max_spill_bytes
        # recorded beside what is spilled (perfweb_agent.delivery.claims)
        self.destination = destination
        self._memory: deque[Envelope] = deque()
        self._disk: deque[tuple[str, int, int]] = deque()  # path, size, samples
        self._disk_bytes = 0
        self._lock = threading.RLock()
        self._claim: claims.FolderLock | None = None
        self._claimed = False
        self.dropped_samples = 0

    def __len__(self) -> int:
        return len(self._memory) + len(self._disk)

    def claim(self) -> None:
        """Lock the spill folder and record its destination (before anything is written
        there), so that no other agent replays it while this one lives."""
        with self._lock:
            if self._claimed or self.spill_folder is None:
                return
            self._claimed = True
            self._claim = claims.claim_own_folder(self.spill_folder, self.destination or {})

    def claimed_folder(self) -> str | None:
        """The spill folder, claimed (`claim`) so that files of ours can be kept there; None
        where there is none (offline)."""
        self.claim()
        return self.spill_folder

    def release_claim(self) -> None:
        """This agent writes nothing more here: the next agent may send what is left."""
        with self._lock:
            if self._claim is not None:
                self._claim.release()
                self._claim = None

    def reset_after_fork(self) -> None:
        """In a forked child: a fresh lock, and our copy of the folder lock closed."""
        self._lock = threading.RLock()
        if self._claim is not None:
            self._claim.forget_after_fork()
            self._claim = None

    @property
    def spilled(self) -> int:
        """Envelopes currently waiting on disk."""
        return len(self._disk)

    def put(self, envelope: Envelope) -> None:
        """Queue an envelope; spill the oldest in memory if memory is full."""
        with self._lock:
            self._memory.append(envelope)
            while len(self._memory) > self.max_memory:
                self._spill(self._memory.popleft())

    def head(self) -> Envelope | None:
        """The oldest undelivered envelope (read back from disk if it was spilled)."""
        with self._lock:
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
        with self._lock:
            if self._disk:
                self._forget_disk_head(dropped=not delivered)
            elif self._memory:
                envelope = self._memory.popleft()
                if not delivered:
                    self.dropped_samples += envelope.samples

    def replace_head(self, envelope: Envelope) -> None:
        """Put `envelope` in the head's place (a refused start, sent again stripped)."""
        with self._lock:
            if self._disk:
                path, size, samples = self._disk[0]
                try:
                    path = layout.write_envelope(os.path.dirname(path), envelope)
                except OSError:
                    return  # the old one stays, is refused again, and is dropped then
                self._disk[0] = (path, len(envelope.gz), envelope.samples)
                self._disk_bytes += len(envelope.gz) - size
            elif self._memory:
                self._memory[0] = envelope

    def spill_all(self) -> None:
        """Move every in-memory envelope to disk (at exit, when time is up)."""
        with self._lock:
            while self._memory:
                self._spill(self._memory.popleft())

    def drop_all(self) -> None:
        """Forget everything (the server refused our token: sending is pointless)."""
        with self._lock:
            while len(self):
                self.pop(delivered=False)

    def remove_empty_folders(self) -> None:
        """Remove this agent's spill folder (and its run folder) if nothing is left in them."""
        if self.spill_folder is None:
            return
        with self._lock:
            left = [n for n in _names(self.spill_folder) if n not in claims.OWN_FILES]
            if self._claim is not None and not left:
                self._claim.release(remove=True)
                self._claim = None
            run_folder = os.path.dirname(self.spill_folder)
            with contextlib.suppress(OSError):
                os.rmdir(self.spill_folder)  # fails, harmlessly, when not empty or not there
            if _names(run_folder) == [claims.LOCK_FILE]:  # a replayer looked in, and left
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(run_folder, claims.LOCK_FILE))
            with contextlib.suppress(OSError):
                os.rmdir(run_folder)

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
        self.claim()
        try:
            path = layout.write_envelope(self.spill_folder, envelope)
        except OSError as exc:
            say_once("spill-error", "cannot spill to %s (%s); dropping", self.spill_folder, exc)
            self.dropped_samples += envelope.samples
            return
        self._disk.append((path, size, envelope.samples))
        self._disk_bytes += size


def agent_outbox(settings: Settings, agent_id: str) -> Outbox:
    """One agent's outbox: it spills into the agent's folder of the spill directory (offline,
    it never spills: the sender writes straight to the offline directory)."""
    folder = layout.agent_dir(settings.effective_spill_dir(), settings.run_id, agent_id)
    return Outbox(
        spill_folder=None if settings.offline else folder,
        max_memory=settings.max_outbox_batches,
        max_spill_bytes=settings.spill_max_bytes,
        destination=claims.destination(settings.server, settings.token),
    )


def _names(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []
