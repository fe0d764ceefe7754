"""POST a JSON body with the standard library, sorting failures into transient and permanent."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from perfweb.alerts.channels.errors import PermanentError, TransientError

TIMEOUT_S = 10.0
USER_AGENT = "perfweb-alerts/1"


def post_json(*, url: str, body: Any, headers: dict[str, str] | None = None) -> str:
    """POST `body` as JSON; return "HTTP <code>" on 2xx, raise the sorted error otherwise."""
    if urlsplit(url).scheme not in ("http", "https"):
        raise PermanentError(f"not an http(s) URL: {url!r}")
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        raise _sorted(error) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, socket.gaierror):
            raise PermanentError(f"unknown host: {reason}") from None
        raise TransientError(f"connection failed: {reason}") from None
    except ValueError as error:  # malformed URL (no host, bad port)
        raise PermanentError(f"bad URL: {error}") from None


def _sorted(error: urllib.error.HTTPError) -> Exception:
    detail = error.read(200).decode("utf-8", "replace").strip()
    message = f"HTTP {error.code}" + (f": {detail}" if detail else "")
    if error.code == 429 or error.code >= 500 or error.code == 408:
        return TransientError(message, retry_after=_retry_after(error.headers.get("Retry-After")))
    return PermanentError(message)


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
