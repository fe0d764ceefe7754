"""Delivery: the outbox, the network thread that empties it, the sampler that fills it.

Modelled on sentry-python's transport: a bounded queue, drop-and-count, jittered backoff,
Retry-After honoured (perfweb_agent.delivery.backoff), fork handlers, a flush at exit with a
deadline. The training thread only appends to buffers; it never waits on these threads and
never sees their exceptions. The sender knows nothing of what it carries: `next_batch`
(perfweb_agent.delivery.batches.Batches.cut) gives each envelope, the start and the finish
included, when the sampler (perfweb_agent.delivery.sampler) asks; `post` sends one request.

At exit the drain has a deadline (`close`). Whatever is still unsent by then, a request the
server has not answered yet included, is spilled by the closing thread itself and the server
is told so in one last heartbeat (`unsent`, docs/protocol.md), so that a run whose finish waits
on the host is not marked lost: `close` returns by the deadline whatever the network does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import log, say_once
from perfweb_agent.delivery import transport, unsent
from perfweb_agent.delivery.batches import Delivery
from perfweb_agent.delivery.link import Link
from perfweb_agent.delivery.outbox import agent_outbox
from perfweb_agent.delivery.replay import agent_replayer
from perfweb_agent.delivery.sampler import NextBatch, Sampler
from perfweb_agent.delivery.transport import PostFn
from perfweb_contract import layout
from perfweb_contract.layout import Envelope

__all__ = ["PATHS", "NextBatch", "PostFn", "Sender"]

PATHS = transport.PATHS
END_RESERVE_MAX_S = 0.5  # of the exit deadline, kept to spill what is left and say so


class Sender:
    """The outbox and the threads that fill and empty it."""

    def __init__(
        self,
        settings: Settings,
        agent_id: str,
        *,
        next_batch: NextBatch,
        post: PostFn = transport.post,
        tick: Callable[[], None] | None = None,
        on_command: Callable[[dict[str, Any]], None] | None = None,
        network_work: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self._post = post
        self._network_work = network_work  # e.g. trace uploads: on this thread, not the sampler's
        self._clock = clock
        self._wall = wall
        self._abandoned = False  # abandon() or a forked child: nothing more is sent
        self._network_wake = threading.Event()
        self._stop = threading.Event()  # close(): the last sample, then drain
        self._network_thread: threading.Thread | None = None
        self._close_deadline = 0.0  # the drain's: the exit deadline less END_RESERVE_MAX_S
        offline = settings.offline
        self.offline_folder = (
            layout.agent_dir(offline, settings.run_id, agent_id) if offline else None
        )
        self.outbox = agent_outbox(settings, agent_id)
        self.link = Link(
            settings,
            agent_id,
            outbox=self.outbox,
            post=post,
            on_command=on_command,
            clock=clock,
            wall=wall,
        )
        self.replayer = agent_replayer(settings, agent_id, post=post, clock=clock)
        self.sampler = Sampler(
            settings,
            tick=tick,
            next_batch=next_batch,
            put=self.outbox.put,
            delivery=self._delivery,
            held=self._held,
            enabled=self._sending,
            cut_done=self._wake_network,
            clock=clock,
        )

    # ------------------------------------------------------------------ public API
    @property
    def dropped(self) -> int:
        """Samples the outbox dropped since start (its spill was full)."""
        return self.outbox.dropped_samples

    @property
    def rejected(self) -> int:
        """Requests the server refused for good since start."""
        return self.link.rejections.count

    @property
    def closing(self) -> bool:
        """Whether `close` (or `abandon`) was called."""
        return self._stop.is_set()

    @property
    def threads(self) -> list[threading.Thread]:
        """The sampler and the network thread (once started)."""
        return [t for t in (self.sampler.thread, self._network_thread) if t is not None]

    def start(self) -> None:
        """Queue the first envelope (the start) and start both threads."""
        self.sampler.cut()
        self.sampler.start()
        self._network_thread = threading.Thread(
            target=self._run_network_safely, name="perf-agent", daemon=True
        )
        self._network_thread.start()

    def close(self, deadline_s: float | None = None) -> None:
        """Stop sampling, queue the last batch and the finish, deliver until the deadline.

        Returns within `deadline_s` (the setting by default) whatever the server does: the
        drain stops a little earlier (END_RESERVE_MAX_S, at most a fifth of the deadline),
        and what it could not send is spilled then and announced (`_keep_unsent`).
        """
        deadline_s = max(0.0, self.settings.exit_deadline if deadline_s is None else deadline_s)
        end = self._clock() + deadline_s
        self._close_deadline = end - min(END_RESERVE_MAX_S, deadline_s / 5)
        self._stop.set()
        self.sampler.stop()
        self._network_wake.set()
        for thread in self.threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.0, self._close_deadline - self._clock()))
        self._keep_unsent(end)

    def abandon(self) -> None:
        """Stop the threads and forget everything queued (nothing will be sent)."""
        self._abandoned = True
        self.outbox.drop_all()
        self._stop.set()
        self.sampler.stop()
        self._network_wake.set()

    def reset_after_fork(self) -> None:
        """In a forked child: no threads, fresh locks, nothing to send."""
        self._abandoned = True
        self._network_thread = None
        self.sampler.reset_after_fork()
        self._network_wake = threading.Event()
        self._stop = threading.Event()
        self.outbox.reset_after_fork()
        if self.replayer is not None:
            self.replayer.after_fork_in_child()

    # ------------------------------------------------------------------ for the sampler
    def _delivery(self) -> Delivery:
        link, rejections = self.link, self.link.rejections
        dropped = self.outbox.dropped_samples
        return Delivery(link.packed, dropped, rejections.count, rejections.last)

    def _held(self) -> bool:
        return self.link.in_flight and len(self.outbox) >= 2

    def _wake_network(self) -> None:
        self._network_wake.set()

    def _sending(self) -> bool:
        """False once abandoned, in a forked child, or once the server refused the token."""
        return not (self._abandoned or self.link.token_refused)

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
            blocked_s = self.link.backoff.wait_s() if len(self.outbox) else 0.0
            self._network_wake.wait(min(1.0, blocked_s or 1.0))
            self._network_wake.clear()
        self.sampler.done.wait(max(0.0, self._close_deadline - self._clock()))
        self._drain_at_exit()

    def _safe_network_work(self) -> None:
        if self._network_work is None or not self._sending():
            return
        try:
            self._network_work()
        except Exception as exc:  # noqa: BLE001
            say_once("network-work", "agent background work failed (%s); it goes on", exc)

    def _stopped(self, deadline: float | None) -> bool:
        """Whether to stop sending now: past `deadline`, or without one, closing (the exit
        drain takes over, with its deadline)."""
        return self._stop.is_set() if deadline is None else self._clock() >= deadline

    def _deliver(self, deadline: float | None = None) -> None:
        """Send envelopes oldest first until empty, blocked, stopped or past `deadline`."""
        while len(self.outbox) and self._sending():
            if self.link.backoff.blocked() or self._stopped(deadline):
                return
            envelope = self.outbox.head()
            if envelope is None or not self._deliver_one(envelope, deadline):
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
        return self.link.deliver(envelope, deadline)

    def _maybe_heartbeat(self) -> None:
        if self.settings.online and self._sending() and not len(self.outbox):
            self.link.heartbeat()

    # ------------------------------------------------------------------ other agents' leftovers
    def _replay(self, deadline: float | None = None) -> None:
        """Between our own requests, send what earlier agents of this host left for this
        server (perfweb_agent.delivery.replay): only once the server has answered us, never
        ahead of our own data, and never while backing off."""
        replayer = self.replayer
        link, backoff = self.link, self.link.backoff
        if replayer is None or replayer.disabled or not self._sending() or not link.answered:
            return

        def may_send() -> bool:
            idle = not len(self.outbox) and not backoff.blocked()
            return idle and not self._stopped(deadline)

        timeout = lambda: backoff.timeout(deadline)  # noqa: E731
        if replayer.send_while(may_send, timeout=timeout, failed=backoff.failed):
            link.last_contact = self._clock()

    def _drain_at_exit(self) -> None:
        if not self._sending():
            return
        deadline = self._close_deadline
        self.link.backoff.last_try()
        while len(self.outbox) and self._sending() and self._clock() < deadline:
            wait = self.link.backoff.wait_s()
            if wait > 0:
                if self._clock() + wait >= deadline:
                    break
                time.sleep(wait)
            self._deliver(deadline)
        if not len(self.outbox):
            self._replay(deadline)
            self.outbox.remove_empty_folders()
        elif self._sending():
            self.outbox.spill_all()  # the closing thread says so (_keep_unsent)
            self.outbox.release_claim()

    # ------------------------------------------------------------------ past the deadline
    def _keep_unsent(self, end: float) -> None:
        """On the closing thread, once the drain's time is up: queue the finish if the
        sampler could not, spill what is unsent and say so (perfweb_agent.delivery.unsent)."""
        if not self._sending() or self._network_thread is None or self.offline_folder is not None:
            return
        timeout = max(0.0, end - self._clock())
        finish = self.sampler.queue_finish(timeout=timeout) or self.sampler.finish
        unsent.keep_unsent(
            self.outbox,
            settings=self.settings,
            agent_id=self.agent_id,
            finish=finish,
            post=self._post,
            timeout=lambda: end - self._clock(),
            wall=self._wall,
        )
