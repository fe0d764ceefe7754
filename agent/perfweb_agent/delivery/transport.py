"""HTTP transport: POST one gzip JSON body, classify the answer. Stdlib only."""

from __future__ import annotations

# The agent's threads import nothing: socket.getaddrinfo imports the idna codec on a
# process's first request by host name, and a fork while the network thread held that
# module's import lock left the forked child waiting on it for ever (its flush at os._exit).
import encodings.idna  # noqa: F401
import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfweb_contract import api, layout

USER_AGENT = "perf-agent/0.1"
PATHS = {  # where each kind of envelope is posted
    layout.KIND_START: api.START_PATH,
    layout.KIND_BATCH: api.BATCH_PATH,
    layout.KIND_FINISH: api.FINISH_PATH,
}


@dataclass
class Reply:
    """What the server answered (status 0 means it could not be reached)."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None
    error: str = ""
    timed_out: bool = False  # no answer within the timeout (the server may still store it)

    @property
    def ok(self) -> bool:
        """2xx: stored (or a duplicate, which is as good)."""
        return 200 <= self.status < 300

    @property
    def transient(self) -> bool:
        """Worth retrying the same request: unreachable, 408, 429 or 5xx."""
        return self.status in (0, 408, 429) or self.status >= 500

    @property
    def refused_token(self) -> bool:
        """401/403: the token is wrong, nothing this agent sends will be taken."""
        return self.status in (401, 403)

    @property
    def permanent(self) -> bool:
        """A 4xx other than the token's: this one message is refused for good."""
        return not self.ok and not self.transient and not self.refused_token

    @property
    def commands(self) -> list[dict[str, Any]]:
        """The commands the server attached to its reply (only well-formed ones)."""
        commands = self.body.get("commands") if isinstance(self.body, dict) else None
        if not isinstance(commands, list):
            return []
        return [c for c in commands if isinstance(c, dict) and isinstance(c.get("type"), str)]


PostFn = Callable[[str, str, "str | None", bytes, float], Reply]


def _timed_out(exc: BaseException) -> bool:
    reason = getattr(exc, "reason", exc)  # URLError wraps the socket's error
    return isinstance(reason, TimeoutError) or "timed out" in str(reason)


def encode(body: dict[str, Any]) -> bytes:
    """A request body as compact gzip JSON."""
    raw = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    return gzip.compress(raw, compresslevel=5)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: treat as "use your own backoff"


def _parse(data: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(data.decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def post(server: str, path: str, token: str | None, gz_body: bytes, timeout: float) -> Reply:
    """POST `gz_body` (already gzip JSON) to `server + path`; never raises."""
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    return _send(server, path, token, timeout, data=gz_body, headers=headers)


def post_json(
    server: str, path: str, token: str | None, body: dict[str, Any], timeout: float
) -> Reply:
    """POST `body` as plain JSON (the jobs API's small messages); never raises."""
    data = json.dumps(body).encode()
    return _send(
        server, path, token, timeout, data=data, headers={"Content-Type": "application/json"}
    )


def get(server: str, path: str, token: str | None, timeout: float) -> Reply:
    """GET `server + path` (used by `perf-agent doctor`); never raises."""
    return _send(server, path, token, timeout)


def _send(
    server: str,
    path: str,
    token: str | None,
    timeout: float,
    *,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """The agent's one HTTP exchange: every answer, and every failure to get one, is a Reply
    (status 0 when the server could not be reached)."""
    request = urllib.request.Request(
        server.rstrip("/") + path, data=data, method="GET" if data is None else "POST"
    )
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    request.add_header("User-Agent", USER_AGENT)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return Reply(response.status, _parse(response.read()))
    except urllib.error.HTTPError as exc:
        body = _parse(exc.read() or b"")
        retry = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        return Reply(exc.code, body, retry, str(body.get("error") or exc.reason))
    except Exception as exc:  # noqa: BLE001 - unreachable, timeout, reset: all transient
        return Reply(0, {}, None, f"{type(exc).__name__}: {exc}", timed_out=_timed_out(exc))
