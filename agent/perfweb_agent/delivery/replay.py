"""Send what earlier agents of this host left in the spill directory, in the background.

An agent that could not reach its server before it ended leaves its requests in the spill
directory (agent/perfweb_agent/delivery/outbox.py). The next agent on the host that talks to the
same server with the same token sends them for it, one file at a time between its own requests, so
that no `perf-agent upload` is needed after an outage. It takes a whole run folder at a time (the
run's lock, then each agent folder whose writer is gone) and sends in `perf-agent upload`'s
order: starts, batches, finishes, the final finish last, then traces. The server drops what
it already has, so a file sent twice (a crash between the reply and the unlink) is stored
once; a file the server refuses for good is renamed `*.rejected`, counted, and left there.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import log
from perfweb_agent.delivery import claims, traces, transport, upload
from perfweb_agent.delivery.claims import FolderLock
from perfweb_agent.delivery.transport import PostFn
from perfweb_contract import api, layout

REJECTED_SUFFIX = ".rejected"
REPLAY_SCAN_EVERY_S = 30.0  # look for other agents' leftovers this often


@dataclass
class Replayed:
    """What one replay step did: the reply (None when there was nothing to send)."""

    reply: transport.Reply | None
    path: str = ""


class Replayer:
    """The queue of another agent's leftover files, taken a run folder at a time."""

    def __init__(
        self,
        *,
        root: str,
        own_folder: str,
        server: str,
        token: str | None,
        post: PostFn,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.own_folder = own_folder
        self.server = server
        self.token = token
        self.destination = claims.destination(server, token)
        self._post = post
        self._clock = clock
        self._next_scan = 0.0
        self._queue: deque[str] = deque()
        self._run_lock: FolderLock | None = None
        self._agent_locks: list[FolderLock] = []
        self.sent = 0
        self.rejected = 0
        self.disabled = False

    def pending(self) -> bool:
        """True while files of a taken run are waiting to be sent."""
        return bool(self._queue)

    def scan(self) -> bool:
        """Take the next run folder that holds files for our server; True when one was."""
        if self._queue or self.disabled:
            return bool(self._queue)
        self.release()
        for run_folder in _subfolders(self.root):
            if self._take(run_folder):
                log.info(
                    "sending %d request(s) an earlier agent left in %s",
                    len(self._queue),
                    run_folder,
                )
                return True
        return False

    def send_while(
        self,
        may_send: Callable[[], bool],
        *,
        timeout: Callable[[], float],
        failed: Callable[[transport.Reply], None],
    ) -> bool:
        """Send waiting files one at a time while `may_send()`, taking a new run folder when
        one is done (looking for one at most every REPLAY_SCAN_EVERY_S); a transient failure
        goes to `failed` and ends it. True when the server answered any."""
        answered = False
        while may_send():
            if not self.pending():
                if self._clock() < self._next_scan:
                    break
                self._next_scan = self._clock() + REPLAY_SCAN_EVERY_S
                if not self.scan():
                    break
            reply = self.send_next(timeout()).reply
            if reply is None:
                break
            if reply.transient:
                failed(reply)
                break
            answered = True
        return answered

    def send_next(self, timeout: float) -> Replayed:
        """Send the oldest waiting file once; act on the answer."""
        if not self._queue:
            return Replayed(None)
        path = self._queue[0]
        try:
            reply = self._send(path, timeout)
        except (OSError, ValueError, KeyError) as exc:  # unreadable: set it aside
            reply = transport.Reply(400, error=f"unreadable: {exc}")
        if reply.ok:
            self.sent += 1
            with contextlib.suppress(OSError):
                os.unlink(path)
            self._done(path)
        elif reply.refused_token:
            self.disabled = True
            self._queue.clear()
            self.release()
        elif reply.permanent:
            self.rejected += 1
            log.warning(
                "server refused %s for good (%s %s); kept as %s%s",
                path,
                reply.status,
                reply.error,
                path,
                REJECTED_SUFFIX,
            )
            with contextlib.suppress(OSError):
                os.replace(path, path + REJECTED_SUFFIX)
            self._done(path)
        return Replayed(reply, path)

    def release(self) -> None:
        """Let go of the run taken (what is left stays on disk for the next agent)."""
        self._queue.clear()
        for lock in self._agent_locks:
            lock.release()
        if self._run_lock is not None:
            self._run_lock.release()
        self._agent_locks, self._run_lock = [], None

    def after_fork_in_child(self) -> None:
        """In a forked child: close our copies of the locks (the parent keeps them)."""
        self._queue.clear()
        for lock in [*self._agent_locks, self._run_lock]:
            if lock is not None:
                lock.forget_after_fork()
        self._agent_locks, self._run_lock = [], None

    # ------------------------------------------------------------------ helpers
    def _take(self, run_folder: str) -> bool:
        run_lock = FolderLock.take(run_folder)
        if run_lock is None:
            return False
        agent_locks = []
        for folder in _subfolders(run_folder):
            if os.path.abspath(folder) == os.path.abspath(self.own_folder):
                continue
            if claims.read_destination(folder) != self.destination:
                continue  # another server's or project's data, or written by an older agent
            lock = FolderLock.take(folder)
            if lock is not None:
                agent_locks.append(lock)
        folders = [lock.folder for lock in agent_locks]
        files = upload.plan_folders(folders)
        files += [path for folder in folders for path in upload.trace_files(folder)]
        if not files:
            for lock in agent_locks:
                lock.release()
                _remove_if_done(lock.folder)
            release_run_folder(run_lock)
            return False
        self._run_lock, self._agent_locks = run_lock, agent_locks
        self._queue.extend(files)
        return True

    def _send(self, path: str, timeout: float) -> transport.Reply:
        if path.endswith(traces.TRACE_SUFFIX):
            return self._send_trace(path, timeout)
        envelope = layout.read_envelope(path)
        return self._post(
            self.server, transport.PATHS[envelope.kind], self.token, envelope.gz, timeout
        )

    def _send_trace(self, path: str, timeout: float) -> transport.Reply:
        agent_folder = os.path.dirname(os.path.dirname(path))
        run_id = os.path.basename(os.path.dirname(agent_folder))
        agent_id = os.path.basename(agent_folder)
        with open(path, "rb") as handle:
            data = handle.read()
        name = os.path.basename(path)[: -len(traces.TRACE_SUFFIX)]
        reply = transport.Reply(0)
        for body in traces.chunk_bodies(run_id, agent_id, name, data):
            reply = self._post(
                self.server, api.TRACE_PATH, self.token, transport.encode(body), timeout
            )
            if not reply.ok:
                break
        return reply

    def _done(self, path: str) -> None:
        self._queue.popleft()
        if self._queue:
            return
        for lock in self._agent_locks:
            lock.release(remove=not _data_files(lock.folder))
            _remove_if_done(lock.folder)
        if self._run_lock is not None:
            release_run_folder(self._run_lock)
        self._agent_locks, self._run_lock = [], None


def agent_replayer(
    settings: Settings,
    agent_id: str,
    *,
    post: PostFn,
    clock: Callable[[], float] = time.monotonic,
) -> Replayer | None:
    """The replayer of an agent that sends to a server (None otherwise): it looks at the
    spill directory for what earlier agents left, never at this agent's own folder."""
    if not (settings.online and settings.server):
        return None
    root = settings.effective_spill_dir()
    return Replayer(
        root=root,
        own_folder=layout.agent_dir(root, settings.run_id, agent_id),
        server=settings.server,
        token=settings.token,
        post=post,
        clock=clock,
    )


def release_run_folder(lock: FolderLock) -> None:
    """Let go of a run folder's lock; remove the folder if nothing else is in it."""
    rest = [n for n in _names(lock.folder) if n != claims.LOCK_FILE]
    lock.release(remove=not rest)
    with contextlib.suppress(OSError):
        os.rmdir(lock.folder)


def _names(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _subfolders(folder: str) -> list[str]:
    paths = [os.path.join(folder, name) for name in _names(folder) if not name.startswith(".")]
    return [path for path in paths if os.path.isdir(path)]


def _data_files(folder: str) -> list[str]:
    """What is left in an agent folder besides its lock and destination."""
    left = [n for n in _names(folder) if n not in claims.OWN_FILES]
    if layout.TRACES_DIR in left and not _names(os.path.join(folder, layout.TRACES_DIR)):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(folder, layout.TRACES_DIR))
        left.remove(layout.TRACES_DIR)
    return left


def _remove_if_done(folder: str) -> None:
    if not _data_files(folder):
        for name in claims.OWN_FILES:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
        with contextlib.suppress(OSError):
            os.rmdir(folder)
