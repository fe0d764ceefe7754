"""HTTP transport: POST one gzip JSON body, classify the answer. Stdlib only."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

USER_AGENT = "perf-agent/0.1"


@dataclass
class Reply:
    """What the server answered (status 0 means it could not be reached)."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        """2xx: stored (or a duplicate, which is as good)."""
        return 200 <= self.status < 300

    @property
    def transient(self) -> bool:
        """Worth retrying the same request: unreachable, 408, 429 or 5xx."""
        return self.status in (0, 408, 429) or self.status >= 500

    @property
    def commands(self) -> list[dict[str, Any]]:
        """The commands the server attached to its reply (only well-formed ones)."""
        commands = self.body.get("commands") if isinstance(self.body, dict) else None
        if not isinstance(commands, list):
            return []
        return [c for c in commands if isinstance(c, dict) and isinstance(c.get("type"), str)]


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
    request = urllib.request.Request(server.rstrip("/") + path, data=gz_body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Content-Encoding", "gzip")
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
        return Reply(0, {}, None, f"{type(exc).__name__}: {exc}")


def get(server: str, path: str, token: str | None, timeout: float) -> Reply:
    """GET `server + path` (used by `perf-agent doctor`); never raises."""
    request = urllib.request.Request(server.rstrip("/") + path, method="GET")
    request.add_header("User-Agent", USER_AGENT)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return Reply(response.status, _parse(response.read()))
    except urllib.error.HTTPError as exc:
        body = _parse(exc.read() or b"")
        return Reply(exc.code, body, None, str(body.get("error") or exc.reason))
    except Exception as exc:  # noqa: BLE001
        return Reply(0, {}, None, f"{type(exc).__name__}: {exc}")
