"""A loopback ingest server for the agent's tests (stdlib http.server in a thread).

It plays healthy, down (socket closed: connection refused), slow, 500s and 429 with
Retry-After, a gateway timing out chosen paths (`hold`: held, then 504, not stored), refuses
chosen requests for good (400, `refuse`), and stores what it accepts
the way the real server does: a batch is identified by (run_id, agent_id, seq) and stored
once, a repeat answers `"duplicate": true`.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from perfweb_contract import protocol

TOKEN = "test-token"


class Store:
    """Everything the fake server accepted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: dict[str, dict[str, Any]] = {}
        self.batches: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.finishes: dict[str, dict[str, Any]] = {}
        self.heartbeats = 0
        self.heartbeat_bodies: list[dict[str, Any]] = []
        self.trace_chunks: dict[tuple[str, str, str, int], dict[str, Any]] = {}
        self.duplicates = 0
        self.packed_batches = 0  # batches whose arrays came packed (protocol.pack_floats)
        self.arrival: list[tuple[str, int]] = []  # (agent_id, seq) in order stored
        self.statuses: Counter[int] = Counter()
        self.request_times: list[tuple[float, int]] = []  # (time, status)
        self.slow_windows: list[tuple[float, float]] = []  # when slow answers were held back

    def samples(self, agent_id: str | None = None) -> int:
        """Metric samples stored (optionally for one agent)."""
        return sum(
            len(m["v"])
            for (_, agent, _), body in self.batches.items()
            if agent_id in (None, agent)
            for m in body["metrics"]
        )

    def steps(self, agent_id: str | None = None) -> list[int]:
        """Step indexes stored, in seq order."""
        out: list[int] = []
        for key in sorted(self.batches):
            if agent_id in (None, key[1]) and "steps" in self.batches[key]:
                out += self.batches[key]["steps"]["index"]
        return out

    def step_columns(self) -> dict[str, list[float]]:
        """Every stored step as columns, in seq order."""
        columns: dict[str, list[float]] = {"duration": [], "data_wait": [], "index": []}
        for key in sorted(self.batches):
            steps = self.batches[key].get("steps")
            if steps:
                for name in columns:
                    columns[name] += steps[name]
        return columns

    def trace(self, name_prefix: str = "") -> bytes:
        """The first complete trace whose name starts with `name_prefix`, reassembled."""
        import base64

        names = sorted({k[2] for k in self.trace_chunks if k[2].startswith(name_prefix)})
        chunks = sorted((k[3], v) for k, v in self.trace_chunks.items() if k[2] == names[0])
        assert len(chunks) == chunks[0][1]["chunks"]
        return b"".join(base64.b64decode(v["data"]) for _, v in chunks)

    def facts(self) -> dict[str, Any]:
        """All facts merged, later batches winning."""
        merged: dict[str, Any] = {}
        for start in self.starts.values():
            merged.update(start.get("facts") or {})
        for key in sorted(self.batches):
            merged.update(self.batches[key].get("facts") or {})
        return merged

    def metric(self, device: str, name: str) -> list[float]:
        """All values stored for one series."""
        values: list[float] = []
        for key in sorted(self.batches):
            for m in self.batches[key]["metrics"]:
                if m["device"] == device and m["name"] == name:
                    values += m["v"]
        return values


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a slow reply: expected here


class FakeServer:
    """`with FakeServer() as server:`; set `server.mode` or queue `server.fail_next`."""

    def __init__(self) -> None:
        self.store = Store()
        self.mode = "healthy"  # healthy | slow | 500 | 429
        self.fail_next: list[str] = []  # modes for the next requests, then `mode`
        self.slow_s = 1.0
        # path suffix -> seconds each such request is held, then answered 504 and not stored
        # (a gateway in front of a server whose queue is that long)
        self.hold: dict[str, float] = {}
        self.retry_after = 1
        self.commands: list[dict[str, Any]] = []
        self.has_trace_endpoint = True
        self.features = [protocol.FEATURE_PACKED_ARRAYS]  # what start's reply lists
        # (path, body) -> an error to answer 400 with, or None to take the request
        self.refuse: Callable[[str, dict[str, Any]], str | None] = lambda path, body: None
        self.refused: list[tuple[str, dict[str, Any]]] = []
        self.refuse_status = 400
        self._httpd: ThreadingHTTPServer | None = None
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        """Listen (on the same port as before, if there was one)."""
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self._httpd = _QuietServer(("127.0.0.1", self.port), handler)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def down(self) -> None:
        """Stop listening: connections are refused until `up()`."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def next_mode(self) -> str:
        with self.store.lock:
            return self.fail_next.pop(0) if self.fail_next else self.mode

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


class _Handler(BaseHTTPRequestHandler):
    server_ref: FakeServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        store = self.server_ref.store
        with store.lock:
            store.statuses[status] += 1
            store.request_times.append((time.monotonic(), status))

    def do_GET(self) -> None:  # noqa: N802
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._reply(401, {"error": "bad token"})
        self._reply(200, {"runs": []})

    def do_POST(self) -> None:  # noqa: N802
        server = self.server_ref
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = server.next_mode()
        if mode == "500":
            return self._reply(500, {"error": "boom"})
        if mode == "429":
            return self._reply(
                429, {"error": "slow down"}, {"Retry-After": str(server.retry_after)}
            )
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._reply(401, {"error": "token is unknown"})
        if self.path.endswith("/trace") and not server.has_trace_endpoint:
            return self._reply(404, {"error": "not found"})
        if self.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        body = json.loads(raw)
        refusal = server.refuse(self.path, body)
        if refusal is not None:
            with server.store.lock:
                server.refused.append((self.path, body))
            return self._reply(server.refuse_status, {"error": refusal})
        held = next((s for p, s in server.hold.items() if self.path.endswith(p)), None)
        if held is not None:
            time.sleep(held)
            return self._reply(504, {"error": "the server did not answer in time"})
        reply = self._store(self.path, body)
        if mode == "slow":
            began = time.monotonic()
            time.sleep(server.slow_s)  # stored, but the client may have given up: a retry
            with server.store.lock:
                server.store.slow_windows.append((began, time.monotonic()))
        self._reply(200, reply)

    def _store(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        store = self.server_ref.store
        with store.lock:
            commands, self.server_ref.commands = self.server_ref.commands, []  # delivered once
        reply: dict[str, Any] = {"ok": True, "commands": commands}
        with store.lock:
            if path.endswith("/start"):
                store.starts[body["agent_id"]] = body
                reply["features"] = self.server_ref.features
            elif path.endswith("/batch"):
                if _unpack(body):
                    store.packed_batches += 1
                key = (body["run_id"], body["agent_id"], int(body["seq"]))
                reply["duplicate"] = key in store.batches
                if key in store.batches:
                    store.duplicates += 1
                else:
                    store.batches[key] = body
                    store.arrival.append((key[1], key[2]))
            elif path.endswith("/finish"):
                store.finishes[body["agent_id"]] = body
            elif path.endswith("/trace"):
                key = (body["run_id"], body["agent_id"], body["name"], int(body["chunk"]))
                store.trace_chunks[key] = body
            elif path.endswith("/heartbeat"):
                store.heartbeats += 1
                store.heartbeat_bodies.append(body)
        return reply


def _unpack(batch: dict[str, Any]) -> bool:
    """Turns a batch's packed arrays back into lists, as the real server reads them; True
    when it had any."""
    found = False
    arrays = [(m, key) for m in batch.get("metrics", []) for key in ("t", "v")]
    steps = batch.get("steps") or {}
    arrays += [(steps, key) for key in protocol.STEP_ARRAYS if key in steps]
    for holder, key in arrays:
        if isinstance(holder[key], str):
            found = True
            holder[key] = protocol.unpack_floats(holder[key])
            if key == "index":
                holder[key] = [int(i) for i in holder[key]]
    return found
