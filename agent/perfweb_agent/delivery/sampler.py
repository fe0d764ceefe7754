"""The sampling thread: a tick every `interval`, a batch every `flush_interval`.

Sampling has a thread of its own so that a slow server never delays a sample: the network
thread may wait on a request (up to the HTTP timeout) while ticks go on. While a request is
in flight and another batch already waits behind it (`held`), the sampler lets its next
batch grow (up to `max_batch_samples` or COALESCE_MAX_S), so a server that takes longer to
answer than the flush interval gets fewer, larger batches and stays live instead of falling
ever further behind. At close it takes one last sample, cuts the last batch and queues the
finish. It knows nothing of what a batch holds nor of where it goes: it calls `next_batch`
(perfweb_agent.delivery.batches.Batches.cut) and puts what it gives into the outbox.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import log, say_once
from perfweb_agent.delivery.batches import Delivery
from perfweb_contract.layout import Envelope

COALESCE_MAX_S = 60.0  # a held batch is cut after this long whatever the network does

NextBatch = Callable[..., Envelope | None]  # Batches.cut(delivery, *, due, final)


class Sampler:
    """One daemon thread that ticks the collectors and cuts batches on time."""

    def __init__(
        self,
        settings: Settings,
        *,
        tick: Callable[[], None] | None,
        next_batch: NextBatch,
        put: Callable[[Envelope], None],
        delivery: Callable[[], Delivery],
        held: Callable[[], bool],
        enabled: Callable[[], bool],
        cut_done: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._tick = tick
        self._next_batch = next_batch
        self._put = put  # into the outbox
        self._delivery = delivery  # what the sender knows that a batch reports
        self._held = held  # a request is in flight and a batch waits behind it
        self._enabled = enabled  # False once the sender gave up (refused token, abandoned)
        self._cut_done = cut_done  # a batch may be waiting: wake the network thread
        self._clock = clock
        self._last_cut = clock()
        self._wake = threading.Event()
        self.stopping = threading.Event()  # close(): take the last sample, then stop
        self.done = threading.Event()  # the last batch and the finish are queued
        self._finish_lock = threading.Lock()  # this thread or the closing one queues it
        self.finish: Envelope | None = None  # the finish as queued
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread."""
        self.thread = threading.Thread(
            target=self._run_safely, name="perf-agent-sampler", daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        """End, once the last sample, batch and finish are queued."""
        self.stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """Look at the buffers now (e.g. a batch is full)."""
        self._wake.set()

    def tick(self) -> None:
        """One sample of every collector; a collector's error is said once, never raised."""
        if self._tick is None:
            return
        try:
            self._tick()
        except Exception as exc:  # noqa: BLE001
            say_once("tick-error", "a collector failed (%s); sampling goes on", exc)

    def reset_after_fork(self) -> None:
        """In a forked child: no thread, fresh events."""
        self.thread = None
        self._wake = threading.Event()
        self.stopping = threading.Event()
        self.done = threading.Event()
        self._finish_lock = threading.Lock()

    def cut(self, *, due: bool = True) -> Envelope | None:
        """Queue the next envelope, if there is one (a batch: when `due` or full)."""
        envelope = self._next_batch(self._delivery(), due=due)
        if envelope is not None:
            self._put(envelope)
        return envelope

    def queue_finish(self, *, timeout: float) -> Envelope | None:
        """Queue the finish once (this thread does at close, or the closing thread if this
        one never got to it); the finish as queued, or None."""
        if not self._finish_lock.acquire(timeout=timeout):
            return None
        try:
            if self.finish is None and self._enabled():
                self.finish = self._next_batch(self._delivery(), final=True)
                if self.finish is not None:
                    self._put(self.finish)
            return self.finish
        finally:
            self._finish_lock.release()

    def _run_safely(self) -> None:
        try:
            self._run()
        except Exception:  # noqa: BLE001 - a guest never crashes its host
            log.exception("agent sampler stopped after an unexpected error")
        finally:
            try:
                if self.stopping.is_set() and self._enabled():  # the last sample and batch
                    self.tick()
                    self.cut()
                    self.queue_finish(timeout=-1)
            except Exception:  # noqa: BLE001
                log.exception("agent could not queue its last batch")
            self.done.set()
            self._cut_done()

    def _run(self) -> None:
        interval = self.settings.interval
        next_sample = self._clock()
        next_flush = next_sample + self.settings.flush_interval
        while not self.stopping.is_set():
            now = self._clock()
            if now >= next_sample:
                self.tick()
                next_sample = max(next_sample + interval, now + interval * 0.5)
            due = now >= next_flush
            on_time = due and (not self._held() or now - self._last_cut >= COALESCE_MAX_S)
            if self.cut(due=on_time) is not None or on_time:
                self._last_cut = self._clock()
                next_flush = now + self.settings.flush_interval
                self._cut_done()
            elif due:  # held behind a slow request: look again next tick
                next_flush = now + min(interval, self.settings.flush_interval)
            self._wake.wait(max(0.0, min(next_sample, next_flush) - self._clock()))
            self._wake.clear()
