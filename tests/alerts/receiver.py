"""A loopback webhook receiver (stdlib http.server in a thread) that records what it gets.

`status` sets the answer (200 by default, or a list answered in turn), `body_out` its body;
`hold` makes the
first request wait until `release()`; a request counts as acknowledged only when the sender
was still there to read the answer (a sender killed mid-request is not acknowledged).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    at: float
    acknowledged: bool = False


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)
    headers_out: dict[str, str] = field(default_factory=dict)
    hold_first: bool = False
    delay_s: float = 0.0
    body_out: bytes = b"ok"
    got: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        self._released.set()

    def bodies(self, event: str | None = None, acknowledged: bool | None = None) -> list[Any]:
        with self._lock:
            return [
                r.body
                for r in self.got
                if (event is None or r.body.get("event") == event)
                and (acknowledged is None or r.acknowledged == acknowledged)
            ]

    def wait_for(
        self,
        count: int,
        event: str | None = None,
        timeout: float = 30.0,
        acknowledged: bool | None = True,
    ) -> list[Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.bodies(event, acknowledged)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"wanted {count} {event or ''} messages, got {self.bodies()}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                record = Received(
                    path=self.path,
                    headers=dict(self.headers),
                    body=json.loads(raw or b"null"),
                    at=time.time(),
                )
                with receiver._lock:
                    first = not receiver.got
                    receiver.got.append(record)
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                if receiver.hold_first and first:
                    receiver._released.wait(60)
                    if _peer_gone(self.connection):
                        return
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                try:
                    self.send_response(status)
                    for name, value in receiver.headers_out.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(receiver.body_out)))
                    self.end_headers()
                    self.wfile.write(receiver.body_out)
                    self.wfile.flush()
                except OSError:
                    return
                record.acknowledged = 200 <= status < 300

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _peer_gone(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0.5)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
