"""The agent's two daemon threads: one samples and cuts batches, one delivers them.

Modelled on sentry-python's transport: a bounded queue, drop-and-count, jittered backoff,
Retry-After honoured, fork handlers, a flush at exit with a deadline. The training thread
only appends to buffers; it never waits on these threads and never sees their exceptions.

Sampling has a thread of its own so that a slow server never delays a sample: the network
thread may wait on a request (up to the HTTP timeout) while ticks go on. While a request is
in flight and another batch already waits behind it, the sampler holds its next batch and
lets it grow (up to `max_batch_samples` or COALESCE_MAX_S), so a server that takes longer to
answer than the flush interval gets fewer, larger batches and stays live instead of falling
ever further behind.
"""

from __future__ import annotations

import gzip
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from perfweb_agent.delivery import transport
from perfweb_agent.delivery.claims import destination
from perfweb_agent.delivery.outbox import Outbox
from perfweb_agent.delivery.replay import Replayer
from perfweb_agent.delivery.transport import PostFn
from perfweb_agent.runtime import sanitize
from perfweb_agent.runtime.buffer import FactBuffer, SampleBuffer, StepBuffer
from perfweb_agent.runtime.config import Settings
from perfweb_agent.runtime.logger import log, say_once
from perfweb_contract import api, layout, protocol
from perfweb_contract.layout import Envelope

__all__ = ["PATHS", "PostFn", "Sender"]

PATHS = transport.PATHS
COALESCE_MAX_S = 60.0  # a held batch is cut after this long whatever the network does
TIMEOUT_MAX_S = 120.0  # a server slower than the HTTP timeout: wait up to this long
REPLAY_SCAN_EVERY_S = 30.0  # look for other agents' leftovers this often
REJECTIONS_LOGGED = 10  # a log line for each of the first rejections, then only counts
FACT_REJECTED = "agent.rejected_requests"
FACT_REJECTED_LAST = "agent.rejected_last"


class Sender:
    """Owns the buffers, the outbox and the threads that fill and empty it."""

    def __init__(
        self,
        settings: Settings,
        agent_id: str,
        *,
        tick: Callable[[], None] | None = None,
        on_command: Callable[[dict[str, Any]], None] | None = None,
        network_work: Callable[[], None] | None = None,
        post: PostFn = transport.post,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.samples = SampleBuffer(settings.max_buffered_samples)
        self.steps = StepBuffer()
        self.facts = FactBuffer()
        self.sanitizer = sanitize.Sanitizer()
        self.devices: list[dict[str, Any]] = []
        self.rank: int | None = None
        self.run_name: Callable[[], str | None] | None = None  # a renaming, taken once
        self.rejected = 0  # requests the server refused for good (4xx)
        self._last_rejection = ""
        self._reported: dict[str, Any] = {}  # counter facts as last sent
        self._tick = tick
        self._on_command = on_command
        self._network_work = network_work  # e.g. trace uploads: on this thread, not the sampler's
        self._post = post
        self._clock = clock
        self._wall = wall
        self._seq = 0
        self._packed = False  # send arrays packed: the server said it reads them (start's reply)
        self._sampler_wake = threading.Event()
        self._network_wake = threading.Event()
        self._stop = threading.Event()  # close(): take the last sample, then drain
        self._last_queued = threading.Event()  # the last batch and the finish are queued
        self._thread: threading.Thread | None = None  # the sampler
        self._network_thread: threading.Thread | None = None
        self._in_flight = False
        self._last_cut = clock()
        self._timeout_s = settings.http_timeout
        self._failures = 0
        self._blocked_until = 0.0
        self._last_contact = clock()
        self._answered = False  # the server took one of our requests: replaying may begin
        self._next_scan = 0.0
        self._disabled = False  # the server refused our token: stop trying
        self._rate_limited = False  # the current block is the server's Retry-After
        self._start_retried = False  # a refused start was sent again, stripped
        self._finish_body: dict[str, Any] | Callable[[], dict[str, Any]] | None = None
        self._close_deadline = 0.0
        root = settings.offline if settings.offline else settings.effective_spill_dir()
        folder = layout.agent_dir(root, settings.run_id, agent_id)
        self.offline_folder = folder if settings.offline else None
        self.outbox = Outbox(
            spill_folder=None if settings.offline else folder,
            max_memory=settings.max_outbox_batches,
            max_spill_bytes=settings.spill_max_bytes,
            destination=destination(settings.server, settings.token),
        )
        self.replayer: Replayer | None = None
        if settings.online and settings.server:
            self.replayer = Replayer(
                root=root, own_folder=folder, server=settings.server, token=settings.token,
                post=post,
            )

    # ------------------------------------------------------------------ public API
    @property
    def dropped(self) -> int:
        """Samples and steps dropped since start (cumulative, sent in every batch)."""
        return self.samples.dropped + self.steps.dropped + self.outbox.dropped_samples

    @property
    def threads(self) -> list[threading.Thread]:
        """The sampler and the network thread (once started)."""
        return [t for t in (self._thread, self._network_thread) if t is not None]

    def start(self, start_body: dict[str, Any]) -> None:
        """Queue the start body and start both threads."""
        self.outbox.put(Envelope(layout.KIND_START, transport.encode(self.clean_start(start_body))))
        self._thread = threading.Thread(
            target=self._run_sampler_safely, name="perf-agent-sampler", daemon=True
        )
        self._network_thread = threading.Thread(
            target=self._run_network_safely, name="perf-agent", daemon=True
        )
        self._thread.start()
        self._network_thread.start()

    def clean_start(self, body: dict[str, Any]) -> dict[str, Any]:
        """The start body with its text cleaned (perfweb_agent.runtime.sanitize) and what was, as
        facts."""
        clean = self.sanitizer.body(body, limits=sanitize.START_LENGTHS)
        devices = body.get("devices")
        if isinstance(devices, list):
            clean["devices"] = [self.sanitizer.device(d) for d in devices if isinstance(d, dict)]
        if self.sanitizer.count:
            clean["facts"] = {**(clean.get("facts") or {}), **self._counter_facts()}
        return clean

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
        self._sampler_wake.set()
        self._network_wake.set()
        for thread in self.threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.0, self._close_deadline - self._clock()) + 1.0)

    def abandon(self) -> None:
        """Stop the threads and forget everything queued (nothing will be sent)."""
        self._disabled = True
        self.outbox.drop_all()
        self._finish_body = None
        self._stop.set()
        self._sampler_wake.set()
        self._network_wake.set()

    def wake(self) -> None:
        """Ask the sampler to look at its buffers now (e.g. a batch is full)."""
        self._sampler_wake.set()

    def reset_after_fork(self) -> None:
        """In a forked child: no threads, fresh locks, nothing to send."""
        self._disabled = True
        self._thread = self._network_thread = None
        self._sampler_wake = threading.Event()
        self._network_wake = threading.Event()
        self._stop = threading.Event()
        self._last_queued = threading.Event()
        self.samples.reset_after_fork()
        self.steps.reset_after_fork()
        self.facts.reset_after_fork()
        self.outbox.reset_after_fork()
        if self.replayer is not None:
            self.replayer.after_fork_in_child()

    # ------------------------------------------------------------------ the sampler
    def _run_sampler_safely(self) -> None:
        try:
            self._run_sampler()
        except Exception:  # noqa: BLE001 - a guest never crashes its host
            log.exception("agent sampler stopped after an unexpected error")
        finally:
            try:
                self._queue_last()
            except Exception:  # noqa: BLE001
                log.exception("agent could not queue its last batch")
            self._last_queued.set()
            self._network_wake.set()

    def _run_sampler(self) -> None:
        interval = self.settings.interval
        next_sample = self._clock()
        next_flush = next_sample + self.settings.flush_interval
        while not self._stop.is_set():
            now = self._clock()
            if now >= next_sample:
                self._safe_tick()
                next_sample = max(next_sample + interval, now + interval * 0.5)
            if self._batch_wanted(due=now >= next_flush, now=now):
                self.cut_batch()
                next_flush = now + self.settings.flush_interval
                self._network_wake.set()
            elif now >= next_flush:  # held behind a slow request: look again next tick
                next_flush = now + min(interval, self.settings.flush_interval)
            self._sampler_wake.wait(max(0.0, min(next_sample, next_flush) - self._clock()))
            self._sampler_wake.clear()

    def _batch_wanted(self, *, due: bool, now: float) -> bool:
        if len(self.samples) + len(self.steps) >= self.settings.max_batch_samples:
            return True
        if not due:
            return False
        held = self._in_flight and len(self.outbox) >= 2
        return not held or now - self._last_cut >= COALESCE_MAX_S

    def _safe_tick(self) -> None:
        if self._tick is None:
            return
        try:
            self._tick()
        except Exception as exc:  # noqa: BLE001
            say_once("tick-error", "a collector failed (%s); sampling goes on", exc)

    def cut_batch(self) -> None:
        """Turn the buffers into one batch envelope (if there is anything to send)."""
        self._last_cut = self._clock()
        metrics, count = self.samples.drain()
        steps = self.steps.drain(self.rank)
        facts = self.sanitizer.body(self.facts.drain(), field="facts")
        devices, self.devices = self.devices, []
        devices = [self.sanitizer.device(d) for d in devices]
        for series in metrics:
            series["device"], series["name"] = self.sanitizer.series_key(
                series["device"], series["name"]
            )
        facts.update(self._changed_counter_facts())
        run_name = self.run_name() if self.run_name is not None else None
        if not (metrics or steps or facts or devices or run_name):
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
        if run_name:
            body["run_name"] = self.sanitizer.text(
                run_name, field="run_name", max_length=protocol.RUN_NAME_MAX
            )
        if self._packed:  # read several times faster by the server, no larger gzipped
            protocol.pack_batch_arrays(body)
        self.outbox.put(Envelope(layout.KIND_BATCH, transport.encode(body), self._seq, count))
        self._seq += 1

    def _counter_facts(self) -> dict[str, Any]:
        facts = self.sanitizer.facts()
        if self.rejected:
            facts[FACT_REJECTED] = self.rejected
            facts[FACT_REJECTED_LAST] = self._last_rejection
        return facts

    def _changed_counter_facts(self) -> dict[str, Any]:
        changed = {k: v for k, v in self._counter_facts().items() if self._reported.get(k) != v}
        self._reported.update(changed)
        return changed

    def _queue_last(self) -> None:
        """At close: one last sample, the last batch, and the finish body."""
        if self._disabled or not self._stop.is_set():
            return
        self._safe_tick()
        self.cut_batch()
        finish = self._finish_body
        if callable(finish):
            finish = finish()
        if finish is not None and not self._disabled:
            clean = self.sanitizer.body(finish)
            self.outbox.put(Envelope(layout.KIND_FINISH, transport.encode(clean)))

    # ------------------------------------------------------------------ the network
    def _run_network_safely(self) -> None:
        try:
            self._run_network()
        except Exception:  # noqa: BLE001 - a guest never crashes its host
            log.exception("agent network thread stopped after an unexpected error")
        finally:
            if self.replayer is not None:
                self.replayer.release()

    def _run_network(self) -> None:
        while not self._stop.is_set():
            self._deliver()
            self._safe_network_work()
            self._maybe_heartbeat()
            self._replay()
            self._network_wake.wait(self._idle_wait())
            self._network_wake.clear()
        self._last_queued.wait(max(0.0, self._close_deadline - self._clock()))
        self._drain_at_exit()

    def _safe_network_work(self) -> None:
        if self._network_work is None or self._disabled:
            return
        try:
            self._network_work()
        except Exception as exc:  # noqa: BLE001
            say_once("network-work", "agent background work failed (%s); it goes on", exc)

    def _idle_wait(self) -> float:
        wait = 1.0
        if len(self.outbox) and self._blocked_until > self._clock():
            wait = min(wait, self._blocked_until - self._clock())
        return max(0.0, wait)

    def _deliver(self, deadline: float | None = None) -> None:
        """Send envelopes oldest first until empty, blocked, stopped or past `deadline`."""
        while len(self.outbox) and not self._disabled:
            if self._clock() < self._blocked_until:
                return
            if deadline is None and self._stop.is_set():
                return  # the exit drain takes over, with its deadline
            if deadline is not None and self._clock() >= deadline:
                return
            envelope = self.outbox.head()
            if envelope is None:
                return
            if not self._deliver_one(envelope, deadline):
                return

    def _deliver_one(self, envelope: Envelope, deadline: float | None) -> bool:
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
        reply = self._request(PATHS[envelope.kind], envelope.gz, deadline)
        if envelope.kind == layout.KIND_START and reply.ok:
            features = reply.body.get("features") if isinstance(reply.body, dict) else None
            self._packed = isinstance(features, list) and (
                protocol.FEATURE_PACKED_ARRAYS in features
            )
        return self._handle_reply(reply, envelope)

    def _request(self, path: str, gz: bytes, deadline: float | None) -> transport.Reply:
        """One POST, its timeout adapted to how long this server takes to answer."""
        timeout = self._timeout_s
        if deadline is not None:
            timeout = min(timeout, max(0.05, deadline - self._clock()))
        began = self._clock()
        self._in_flight = True
        try:
            reply = self._post(self.settings.server or "", path, self.settings.token, gz, timeout)
        finally:
            self._in_flight = False
        self._adapt_timeout(reply, elapsed=self._clock() - began, timeout=timeout)
        return reply

    def _adapt_timeout(self, reply: transport.Reply, *, elapsed: float, timeout: float) -> None:
        """A timed-out request doubles the next one's timeout (to TIMEOUT_MAX_S or the
        setting); quick answers bring it back down to the setting."""
        setting = self.settings.http_timeout
        if reply.timed_out and timeout >= self._timeout_s:
            self._timeout_s = min(max(setting, TIMEOUT_MAX_S), self._timeout_s * 2)
            say_once(
                "slow-server", "server did not answer within %.0f s; waiting longer (up to "
                "%.0f s) from now on, sampling goes on", timeout, self._timeout_s,
            )
        elif reply.status:
            self._timeout_s = max(setting, min(self._timeout_s, elapsed * 4))

    def _handle_reply(self, reply: transport.Reply, envelope: Envelope) -> bool:
        now = self._clock()
        if reply.status == 409 and envelope.kind == layout.KIND_START:
            # The run is there already (a start of ours stored before its answer was lost,
            # or another launcher's): what follows belongs to it.
            log.info("server already has this run (409 to start); sending goes on")
            reply = transport.Reply(200, reply.body)
        if reply.ok:
            self.outbox.pop()
            self._failures = 0
            self._last_contact = now
            self._answered = True
            self._run_commands(reply)
            return True
        if reply.transient:
            self._back_off(reply)
            return False
        if reply.refused_token:
            say_once("auth", "server refused the token (%s); sending stops", reply.status)
            self._disabled = True
            self.outbox.drop_all()
            return False
        self._last_contact = now
        self._reject(envelope, reply)
        return True

    def _back_off(self, reply: transport.Reply) -> None:
        self._failures += 1
        self._rate_limited = reply.status == 429 and reply.retry_after is not None
        if self._rate_limited:
            delay = reply.retry_after or 0.0
        else:
            base = self.settings.backoff_base * 2 ** min(self._failures - 1, 16)
            delay = min(self.settings.backoff_max, base) * random.uniform(0.5, 1.5)
        self._blocked_until = self._clock() + delay
        say_once(
            "transient", "server not answering (%s); retrying, nothing is lost",
            reply.error or reply.status,
        )

    def _reject(self, envelope: Envelope, reply: transport.Reply) -> None:
        """A 4xx for this one request: count it, say so, and go on with the next one.

        A refused `start` is sent once more without its free text (name, command, tags,
        facts, ...), so that the run and its data are still stored."""
        self.rejected += 1
        what = envelope.kind if envelope.seq is None else f"{envelope.kind} {envelope.seq}"
        self._last_rejection = f"{what}: {reply.status} {reply.error}"[:300]
        if self.rejected <= REJECTIONS_LOGGED:
            log.warning("server refused %s for good (%s %s); it is counted (fact %s) and "
                        "sending goes on", what, reply.status, reply.error, FACT_REJECTED)
        if envelope.kind == layout.KIND_START and not self._start_retried:
            self._start_retried = True
            stripped = _stripped_start(envelope, self._last_rejection)
            if stripped is not None:
                self.outbox.replace_head(stripped)
                return
        self.outbox.pop(delivered=False)

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
        reply = self._request(api.HEARTBEAT_PATH, transport.encode(body), None)
        self._last_contact = now  # on failure: try again one heartbeat period later
        if reply.ok:
            self._answered = True
            self._run_commands(reply)
        elif reply.refused_token:
            say_once("auth", "server refused the token (%s); sending stops", reply.status)
            self._disabled = True

    # ------------------------------------------------------------------ other agents' leftovers
    def _replay(self, deadline: float | None = None) -> None:
        """Between our own requests, send what earlier agents of this host left for this
        server (perfweb_agent.delivery.replay): only once the server has answered us, never ahead of
        our
        own data, and never while backing off."""
        replayer = self.replayer
        if replayer is None or replayer.disabled or self._disabled or not self._answered:
            return
        while not len(self.outbox) and self._clock() >= self._blocked_until:
            if deadline is None and self._stop.is_set():
                return
            if deadline is not None and self._clock() >= deadline:
                return
            if not replayer.pending():
                if self._clock() < self._next_scan:
                    return
                self._next_scan = self._clock() + REPLAY_SCAN_EVERY_S
                if not replayer.scan():
                    return
            timeout = self._timeout_s
            if deadline is not None:
                timeout = min(timeout, max(0.05, deadline - self._clock()))
            replayed = replayer.send_next(timeout)
            reply = replayed.reply
            if reply is None:
                return
            if reply.transient:
                self._back_off(reply)
                return
            self._last_contact = self._clock()

    def _drain_at_exit(self) -> None:
        if self._disabled:
            return
        deadline = self._close_deadline
        if not self._rate_limited:
            self._blocked_until = 0.0  # one prompt last try, whatever the backoff said
        while len(self.outbox) and not self._disabled and self._clock() < deadline:
            wait = self._blocked_until - self._clock()
            if wait > 0:
                if self._clock() + wait >= deadline:
                    break
                time.sleep(wait)
            self._deliver(deadline)
        if not len(self.outbox):
            self._replay(deadline)
            self.outbox.remove_empty_folders()
        elif not self._disabled:
            self.outbox.spill_all()
            self.outbox.release_claim()
            log.warning(
                "server unreachable at exit: %d request(s) kept in %s; the next agent on "
                "this host sends them once the server answers (or now: perf-agent upload %s)",
                self.outbox.spilled,
                self.outbox.spill_folder,
                self.settings.effective_spill_dir(),
            )


def _stripped_start(envelope: Envelope, why: str) -> Envelope | None:
    """The start without the fields a user or a host can fill with anything."""
    try:
        body = json.loads(gzip.decompress(envelope.gz))
    except (OSError, ValueError):
        return None
    keep = ("run_id", "agent_id", "role", "pid", "rank", "local_rank", "world_size",
            "started_at")
    stripped = {k: body[k] for k in keep if k in body}
    stripped["facts"] = {"agent.start_refused": why}
    return Envelope(layout.KIND_START, transport.encode(stripped))
