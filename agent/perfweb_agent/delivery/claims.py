"""Who may send a spill folder: an exclusive lock per folder and the server it was meant for.

An agent that spills takes its own folder's lock (`flock` on `.lock`, released by the kernel
when the process ends, however it ends) and records where the data was going
(`.destination`: the server URL and a SHA-256 of the token, never the token). A later agent
on the host replays a folder only when it can take that lock (its writer is gone) and the
destination is its own, so it never sends another project's data to its server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any

from perfweb_contract import layout

try:
    import fcntl
except ImportError:  # not POSIX: folders are never locked, so never replayed automatically
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".lock"
DESTINATION_FILE = ".destination"
OWN_FILES = (LOCK_FILE, DESTINATION_FILE)


def destination(server: str | None, token: str | None) -> dict[str, str]:
    """The identity of a destination, as written in `.destination`."""
    digest = hashlib.sha256((token or "").encode()).hexdigest()
    return {"server": (server or "").rstrip("/"), "token_sha256": digest}


def read_destination(folder: str) -> dict[str, Any] | None:
    """The destination a folder's writer recorded, or None (offline data, an older agent)."""
    try:
        with open(os.path.join(folder, DESTINATION_FILE), encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class FolderLock:
    """An exclusive, non-blocking hold on one folder; `release()` or process exit frees it."""

    def __init__(self, folder: str, fd: int) -> None:
        self.folder = folder
        self._fd: int | None = fd

    @classmethod
    def take(cls, folder: str, *, create: bool = False) -> FolderLock | None:
        """The lock, or None when another process holds it (or locking is unavailable)."""
        if fcntl is None:
            return None
        try:
            if create:
                os.makedirs(folder, exist_ok=True)
            fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return cls(folder, fd)

    def release(self, *, remove: bool = False) -> None:
        """Let go; with `remove`, delete the lock and destination files first (the folder
        holds nothing more to send)."""
        if self._fd is None:
            return
        if remove:
            for name in OWN_FILES:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.folder, name))
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = None

    def forget_after_fork(self) -> None:
        """In a forked child: close our copy; the parent's copy keeps the lock held."""
        self.release()


def claim_own_folder(folder: str, dest: dict[str, str]) -> FolderLock | None:
    """Lock the folder this agent spills into and record its destination."""
    lock = FolderLock.take(folder, create=True)
    if lock is not None:
        with contextlib.suppress(OSError):
            layout.write_atomic(os.path.join(folder, DESTINATION_FILE), json.dumps(dest).encode())
    return lock
