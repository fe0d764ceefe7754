"""The local ledger of commands that agents recorded on this host, per server and project.

`perf-agent attach --server URL --token T -- CMD` writes one entry per run here; the
`perf-agent runner` reads it and runs a job only if the job's run, command and working
directory match an entry. The server never writes to this file, so it cannot make a runner
execute a command that nobody ran under the agent on this host.

The file is `~/.perfweb/recorded-commands.json` (or `$PERF_AGENT_LEDGER`):
`{"<server origin>|<token fingerprint>": {"<run_id>": {"command", "cwd", "recorded_at"}}}`.
A project is identified by its token's fingerprint (sha256 prefix): a token belongs to one
project, and a rotated token starts a fresh ledger rather than trusting old entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

ENV_LEDGER = "PERF_AGENT_LEDGER"
MAX_ENTRIES_PER_PROJECT = 1000


@dataclass(frozen=True)
class Entry:
    """One recorded command: what ran, where, and when."""

    run_id: str
    command: list[str]
    cwd: str
    recorded_at: float


def ledger_path() -> str:
    """Where the ledger lives on this host."""
    explicit = os.environ.get(ENV_LEDGER)
    if explicit:
        return explicit
    return os.path.join(os.path.expanduser("~"), ".perfweb", "recorded-commands.json")


def project_key(*, server: str, token: str) -> str:
    """The ledger key of a (server, project token) pair; the token itself is never stored."""
    parts = urlsplit(server.strip())
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    fingerprint = hashlib.sha256(token.encode()).hexdigest()[:16]
    return f"{origin}|{fingerprint}"


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_command(
    *, server: str, token: str, run_id: str, command: list[str], cwd: str, path: str | None = None
) -> None:
    """Remember that an agent ran `command` in `cwd` for this server and project."""
    path = path or ledger_path()
    key = project_key(server=server, token=token)
    with _locked(path):
        data = _load(path)
        runs = data.setdefault(key, {})
        runs[run_id] = {"command": list(command), "cwd": cwd, "recorded_at": time.time()}
        if len(runs) > MAX_ENTRIES_PER_PROJECT:  # keep the newest
            newest = sorted(runs.items(), key=lambda item: item[1].get("recorded_at", 0))
            data[key] = dict(newest[-MAX_ENTRIES_PER_PROJECT:])
        fd, tmp = tempfile.mkstemp(prefix=".ledger-", dir=os.path.dirname(path) or ".")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)


def find_entry(*, server: str, token: str, run_id: str, path: str | None = None) -> Entry | None:
    """The entry an agent recorded for `run_id` under this server and project, if any."""
    data = _load(path or ledger_path())
    raw = data.get(project_key(server=server, token=token), {}).get(run_id)
    if not isinstance(raw, dict):
        return None
    command, cwd = raw.get("command"), raw.get("cwd")
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return None
    if not isinstance(cwd, str):
        return None
    return Entry(run_id, command, cwd, float(raw.get("recorded_at") or 0.0))


def safe_record(**kwargs: object) -> None:
    """`record_command` for the attach launcher: a ledger problem never stops the run."""
    with contextlib.suppress(Exception):
        record_command(**kwargs)  # type: ignore[arg-type]
