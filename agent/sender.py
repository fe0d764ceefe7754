"""The agent's one daemon thread: sample on a tick, cut batches, deliver them.

Modelled on sentry-python's transport: a bounded queue, drop-and-count, jittered backoff,
Retry-After honoured, fork handlers, a flush at exit with a deadline. The training thread
only appends to buffers; it never waits on this thread and never sees its exceptions.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from agent import layout, protocol, transport
from agent.buffer import FactBuffer, SampleBuffer, StepBuffer
from agent.config import Settings
from agent.layout import Envelope
from agent.log import log, say_once
from agent.outbox import Outbox

PostFn = Callable[[str, str, "str | None", bytes, float], transport.Reply]
PATHS = {
    layout.KIND_START: protocol.START_PATH,
    layout.KIND_BATCH: protocol.BATCH_PATH,
    layout.KIND_FINISH: protocol.FINISH_PATH,
}


class Sender:
    """Owns the buffers, the outbox and the thread that empties them."""

    def __init__(
        self,
        settings: Settings,
        agent_id: str,
        *,
        tick: Callable[[], None] | None = None,
        on_command: Callable[[dict[str, Any]], None] | None = None,
        post: PostFn = transport.post,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.samples = SampleBuffer(settings.max_buffered_samples)
        self.steps = StepBuffer()
        self.facts = FactBuffer()
        self.devices: list[dict[str, Any]] = []
        self.rank: int | None = None
        self._tick = tick
        self._on_command = on_command
        self._post = post
        self._clock = clock
        self._wall = wall
        self._seq = 0
        self._packed = False  # send arrays packed: the server said it reads them (start's reply)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._blocked_until = 0.0
        self._last_contact = clock()
        self._disabled = False  # the server refused our token: stop trying
        self._rate_limited = False  # the current block is the server's Retry-After
        self._finish_body: dict[str, Any] | Callable[[], dict[str, Any]] | None = None
        self._close_deadline = 0.0
        root = settings.offline if settings.offline else settings.effective_spill_dir()
        folder = layout.agent_dir(root, settings.run_id, agent_id)
        self.offline_folder = folder if settings.offline else None
        self.outbox = Outbox(
            spill_folder=None if settings.offline else folder,
            max_memory=settings.max_outbox_batches,
            max_spill_bytes=settings.spill_max_bytes,
        )

    # ------------------------------------------------------------------ public API
    @property
    def dropped(self) -> int:
        """Samples and steps dropped since start (cumulative, sent in every batch)."""
        return self.samples.dropped + self.steps.dropped + self.outbox.dropped_samples

    def start(self, start_body: dict[str, Any]) -> None:
        """Queue the start body and start the thread."""
        self.outbox.put(Envelope(layout.KIND_START, transport.encode(start_body)))
        self._thread = threading.Thread(target=self._run_safely, name="perf-agent", daemon=True)
        self._thread.start()

    def close(
        self,
        finish_body: dict[str, Any] | Callable[[], dict[str, Any]] | None,
        deadline_s: float | None = None,
    ) -> None:
        """Stop sampling, queue the last batch and `finish_body`, deliver until the deadline.

        `finish_body` may be a function: it is called after the last sample is taken.
        """
        deadline_s = self.settings.exit_deadline if deadline_s is None else deadline_s
        self._finish_body = finish_body
        self._close_deadline = self._clock() + deadline_s
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(deadline_s + 1.0)

    def abandon(self) -> None:
        """Stop the thread and forget everything queued (nothing will be sent)."""
        self._disabled = True
        self.outbox.drop_all()
        self._finish_body = None
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Ask the thread to look at its buffers now (e.g. a batch is full)."""
        self._wake.set()

    def reset_after_fork(self) -> None:
        """In a forked child: no thread, fresh locks, nothing to send."""
        self._disabled = True
        self._thread = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.samples.reset_after_fork()
        self.steps.reset_after_fork()
        self.facts.reset_after_fork()

    # ------------------------------------------------------------------ the loop
    def _run_safely(self) -> None:
        try:
            self._run()
        except Exception:  # noqa: BLE001 - a guest never crashes its host
            log.exception("agent thread stopped after an unexpected error")

    def _run(self) -> None:
        interval = self.settings.interval
        next_sample = self._clock()
        next_flush = next_sample + self.settings.flush_interval
        while not self._stop.is_set():
            now = self._clock()
            if now >= next_sample:
                self._safe_tick()
                next_sample = max(next_sample + interval, now + interval * 0.5)
            full = len(self.samples) + len(self.steps) >= self.settings.max_batch_samples
            if now >= next_flush or full:
                self.cut_batch()
                next_flush = now + self.settings.flush_interval
            self._deliver(until=next_sample)
            self._maybe_heartbeat()
            timeout = min(next_sample, next_flush) - self._clock()
            if self._blocked_until > self._clock() and len(self.outbox):
                timeout = min(timeout, self._blocked_until - self._clock())
            self._wake.wait(max(0.0, timeout))
            self._wake.clear()
        self._drain_at_exit()

    def _safe_tick(self) -> None:
        if self._tick is None:
            return
        try:
            self._tick()
        except Exception as exc:  # noqa: BLE001
            say_once("tick-error", "a collector failed (%s); sampling goes on", exc)

    def cut_batch(self) -> None:
        """Turn the buffers into one batch envelope (if there is anything to send)."""
        metrics, count = self.samples.drain()
        steps = self.steps.drain(self.rank)
        facts = self.facts.drain()
        devices, self.devices = self.devices, []
        if not (metrics or steps or facts or devices):
            return
        body: dict[str, Any] = {
            "run_id": self.settings.run_id,
            "agent_id": self.agent_id,
            "seq": self._seq,
            "sent_at": self._wall(),
            "metrics": metrics,
            "facts": facts,
            "devices": devices,
            "dropped": self.dropped,
        }
        if steps:
            body["steps"] = steps
            count += len(steps["index"])
        if self._packed:  # read several times faster by the server, no larger gzipped
            protocol.pack_batch_arrays(body)
        self.outbox.put(Envelope(layout.KIND_BATCH, transport.encode(body), self._seq, count))
        self._seq += 1

    # ------------------------------------------------------------------ delivery
    def _deliver(self, until: float) -> None:
        """Send envelopes oldest first until empty, blocked, or the next tick is due."""
        while len(self.outbox) and not self._disabled:
            if self._clock() < self._blocked_until:
                return
            envelope = self.outbox.head()
            if envelope is None:
                return
            if not self._deliver_one(envelope):
                return
            if self._clock() >= until and not self._stop.is_set():
                return

    def _deliver_one(self, envelope: Envelope) -> bool:
        """Deliver the head envelope; True when it left the queue."""
        if self.offline_folder is not None:
            try:
                layout.write_envelope(self.offline_folder, envelope)
                self.outbox.pop()
            except OSError as exc:
                say_once("offline-error", "cannot write to %s (%s)", self.offline_folder, exc)
                self.outbox.pop(delivered=False)
            return True
        if not self.settings.server:
            self.outbox.pop(delivered=False)
            return True
        reply = self._post(
            self.settings.server,
            PATHS[envelope.kind],
            self.settings.token,
            envelope.gz,
            self.settings.http_timeout,
        )
        if envelope.kind == layout.KIND_START and reply.ok:
            features = reply.body.get("features") if isinstance(reply.body, dict) else None
            self._packed = isinstance(features, list) and (
                protocol.FEATURE_PACKED_ARRAYS in features
            )
        return self._handle_reply(reply)

    def _handle_reply(self, reply: transport.Reply) -> bool:
        now = self._clock()
        if reply.ok:
            self.outbox.pop()
            self._failures = 0
            self._last_contact = now
            self._run_commands(reply)
            return True
        if reply.transient:
            self._failures += 1
            self._rate_limited = reply.status == 429 and reply.retry_after is not None
            if self._rate_limited:
                delay = reply.retry_after or 0.0
            else:
                base = self.settings.backoff_base * 2 ** min(self._failures - 1, 16)
                delay = min(self.settings.backoff_max, base) * random.uniform(0.5, 1.5)
            self._blocked_until = now + delay
            say_once(
                "transient", "server not answering (%s); retrying, nothing is lost",
                reply.error or reply.status,
            )
            return False
        if reply.status in (401, 403):
            say_once("auth", "server refused the token (%s); sending stops", reply.status)
            self._disabled = True
            self.outbox.drop_all()
            return False
        say_once("rejected", "server rejected a request (%s: %s)", reply.status, reply.error)
        self.outbox.pop(delivered=False)
        return True

    def _run_commands(self, reply: transport.Reply) -> None:
        for command in reply.commands:
            if self._on_command is None:
                continue
            try:
                self._on_command(command)
            except Exception as exc:  # noqa: BLE001
                say_once("command-error", "command %r failed: %s", command.get("type"), exc)

    def _maybe_heartbeat(self) -> None:
        if not self.settings.online or self._disabled or len(self.outbox):
            return
        now = self._clock()
        if now - self._last_contact < self.settings.heartbeat_after or now < self._blocked_until:
            return
        body = {"run_id": self.settings.run_id, "agent_id": self.agent_id, "sent_at": self._wall()}
        reply = self._post(
            self.settings.server or "",
            protocol.HEARTBEAT_PATH,
            self.settings.token,
            transport.encode(body),
            self.settings.http_timeout,
        )
        if reply.ok:
            self._last_contact = now
            self._run_commands(reply)
        else:
            self._last_contact = now  # try again one heartbeat period later
            self._handle_reply_failure_only(reply)

    def _handle_reply_failure_only(self, reply: transport.Reply) -> None:
        if reply.status in (401, 403):
            say_once("auth", "server refused the token (%s); sending stops", reply.status)
            self._disabled = True

    def _drain_at_exit(self) -> None:
        if self._disabled:
            return
        self._safe_tick()
        self.cut_batch()
        finish = self._finish_body
        if callable(finish):
            finish = finish()
        if finish is not None and not self._disabled:
            self.outbox.put(Envelope(layout.KIND_FINISH, transport.encode(finish)))
        deadline = self._close_deadline
        if not self._rate_limited:
            self._blocked_until = 0.0  # one prompt last try, whatever the backoff said
        while len(self.outbox) and not self._disabled and self._clock() < deadline:
            wait = self._blocked_until - self._clock()
            if wait > 0:
                if self._clock() + wait >= deadline:
                    break
                time.sleep(wait)
            self._deliver(until=deadline)
        if not len(self.outbox):
            self.outbox.remove_empty_folders()
        elif not self._disabled:
            self.outbox.spill_all()
            folder = self.outbox.spill_folder
            log.warning(
                "server unreachable at exit: %d request(s) kept in %s; "
                "send them later with: perf-agent upload %s",
                self.outbox.spilled,
                folder,
                self.settings.effective_spill_dir(),
            )
