"""POST a JSON body with the standard library, sorting failures into transient and permanent.

The destination is checked by `addresses.check_url` at each send and the connection goes to
the address that was checked (TLS still verifies the URL's host name). Redirects are not
followed. What is recorded of a failure is the status code and a fixed phrase, never the
reply's body: the body of an internal service is not the alert author's to read.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from http import HTTPStatus
from typing import Any

from perfweb.alerts.channels.addresses import Target, check_url
from perfweb.alerts.channels.errors import PermanentError, TransientError

TIMEOUT_S = 10.0
USER_AGENT = "perfweb-alerts/1"


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked address, whatever the host name resolves to now."""

    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = target.address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = target.address
        self._context = ssl.create_default_context()

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)


def status_text(code: int) -> str:
    """`HTTP 404 Not Found`: the code and the standard phrase for it."""
    try:
        return f"HTTP {code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"HTTP {code}"


def post_json(*, url: str, body: Any, headers: dict[str, str] | None = None) -> str:
    """POST `body` as JSON; return "HTTP <code>" on 2xx, raise the sorted error otherwise."""
    target = check_url(url)
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = kind(target, TIMEOUT_S)
    sent = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **(headers or {})}
    try:
        connection.request("POST", target.path, body=json.dumps(body).encode(), headers=sent)
        reply = connection.getresponse()
        code, retry_after = reply.status, reply.getheader("Retry-After")
    except ssl.SSLCertVerificationError:
        raise PermanentError("TLS certificate verification failed") from None
    except TimeoutError:
        raise TransientError("connection timed out") from None
    except ConnectionRefusedError:
        raise TransientError("connection refused") from None
    except (OSError, http.client.HTTPException) as error:
        raise TransientError(f"connection failed ({type(error).__name__})") from None
    finally:
        connection.close()
    if 200 <= code < 300:
        return f"HTTP {code}"
    return _sorted(code, retry_after)


def _sorted(code: int, retry_after: str | None) -> str:
    if 300 <= code < 400:
        raise PermanentError(f"{status_text(code)}: redirects are not followed")
    if code == 429 or code >= 500 or code == 408:
        raise TransientError(status_text(code), retry_after=_retry_after(retry_after))
    raise PermanentError(status_text(code))


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
