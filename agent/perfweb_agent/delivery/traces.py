"""Shipping compressed profiler traces: to the offline layout, or in chunks to the server.

Online, a trace goes to `POST /api/v1/ingest/trace` in chunks of at most `CHUNK_BYTES` of
the gzip file, each a JSON body (see docs/protocol.md). If the server cannot take it (not
reachable, or no trace endpoint yet), the trace is kept under the spill directory in the
offline layout so that `perf-agent upload` can send it later.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import say_once
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.transport import PostFn
from perfweb_contract import api, layout, protocol

CHUNK_BYTES = protocol.TRACE_CHUNK_MAX_BYTES  # base64 makes it ~5.4 MiB: under the 8 MiB limit
TRACE_SUFFIX = ".pt.trace.json.gz"


def trace_path(folder: str, name: str) -> str:
    """Where a trace lives in an agent's folder."""
    return os.path.join(folder, layout.TRACES_DIR, name + TRACE_SUFFIX)


def chunk_bodies(
    run_id: str, agent_id: str, name: str, data: bytes, chunk_bytes: int = CHUNK_BYTES
) -> list[dict[str, Any]]:
    """The request bodies that carry `data` (gzip Kineto JSON) in order."""
    digest = hashlib.sha256(data).hexdigest()
    count = max(1, -(-len(data) // chunk_bytes))
    return [
        {
            "run_id": run_id,
            "agent_id": agent_id,
            "name": name,
            "chunk": index,
            "chunks": count,
            "size": len(data),
            "sha256": digest,
            "encoding": "gzip+base64",
            "data": base64.b64encode(
                data[index * chunk_bytes : (index + 1) * chunk_bytes]
            ).decode(),
            "sent_at": time.time(),
        }
        for index in range(count)
    ]


def upload_trace(
    server: str, token: str | None, bodies: list[dict[str, Any]], post: PostFn, attempts: int = 3
) -> transport.Reply:
    """Send every chunk (each retried a few times); the last reply, or the first failure."""
    reply = transport.Reply(0)
    for body in bodies:
        payload = transport.encode(body)
        for attempt in range(attempts):
            reply = post(server, api.TRACE_PATH, token, payload, 30.0)
            if reply.ok or not reply.transient:
                break
            time.sleep(reply.retry_after if reply.retry_after is not None else 0.5 * 2**attempt)
        if not reply.ok:
            return reply
    return reply


@dataclass(frozen=True, slots=True)
class Shipped:
    """Where a trace went, in words; `no_endpoint`: the server has no trace endpoint (404)."""

    where: str
    no_endpoint: bool = False


class TraceShipper:
    """Writes a trace to the offline layout, or uploads it, or keeps it in the spill folder."""

    def __init__(
        self,
        settings: Settings,
        agent_id: str,
        *,
        post: PostFn,
        offline_folder: str | None,
        keep_folder: Callable[[], str | None],
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self._post = post
        self._offline_folder = offline_folder
        self._keep_folder = keep_folder  # the spill folder, claimed for us (Outbox.claimed_folder)

    def deliver(self, name: str, data: bytes) -> Shipped:
        """Write or upload one trace (gzip Kineto JSON); kept on disk if the server does not
        take it."""
        settings = self.settings
        if self._offline_folder is not None:
            layout.write_atomic(trace_path(self._offline_folder, name), data)
            return Shipped("offline")
        bodies = chunk_bodies(settings.run_id, self.agent_id, name, data)
        reply = upload_trace(settings.server or "", settings.token, bodies, self._post)
        if reply.ok:
            return Shipped("uploaded")
        no_endpoint = reply.status == 404
        folder = self._keep_folder()  # locked and labelled: no other agent replays it
        if folder is None:
            return Shipped(f"dropped ({reply.status})", no_endpoint)
        say_once(
            "trace-kept",
            "server did not take a trace (%s); traces are kept in %s",
            reply.status or "unreachable",
            os.path.join(folder, layout.TRACES_DIR),
        )
        layout.write_atomic(trace_path(folder, name), data)
        return Shipped("kept on disk", no_endpoint)
