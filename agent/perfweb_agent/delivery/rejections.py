"""Requests the server refused for good (a 4xx other than the token's).

Each is counted (the facts FACT_REJECTED and FACT_REJECTED_LAST of the next batch, the
finish's `produced.rejected`), the first REJECTIONS_LOGGED are logged, and sending goes on
with the next one. A refused `start` is sent once more without its free text (name,
command, tags, facts, ...), so that the run and its data are still stored.
"""

from __future__ import annotations

import gzip
import json

from perfweb_agent.core.logger import log
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.batches import FACT_REJECTED
from perfweb_contract import layout
from perfweb_contract.layout import Envelope

REJECTIONS_LOGGED = 10  # a log line for each of the first rejections, then only counts
# what a start refused for good keeps when it is sent again
START_KEPT = ("run_id", "agent_id", "role", "pid", "rank", "local_rank", "world_size", "started_at")


class Rejections:
    """The count of refused requests, the last one in words, and the start's one retry."""

    def __init__(self) -> None:
        self.count = 0
        self.last = ""
        self._start_retried = False

    def refused(self, envelope: Envelope, reply: transport.Reply) -> Envelope | None:
        """Count and say this refusal; what to send in its place (a stripped start, once),
        or None to go on with the next request."""
        self.count += 1
        what = envelope.kind if envelope.seq is None else f"{envelope.kind} {envelope.seq}"
        self.last = f"{what}: {reply.status} {reply.error}"[:300]
        if self.count <= REJECTIONS_LOGGED:
            log.warning(
                "server refused %s for good (%s %s); it is counted (fact %s) and sending goes on",
                what,
                reply.status,
                reply.error,
                FACT_REJECTED,
            )
        if envelope.kind != layout.KIND_START or self._start_retried:
            return None
        self._start_retried = True
        return stripped_start(envelope, self.last)


def stripped_start(envelope: Envelope, why: str) -> Envelope | None:
    """The start without the fields a user or a host can fill with anything."""
    try:
        body = json.loads(gzip.decompress(envelope.gz))
    except (OSError, ValueError):
        return None
    stripped = {k: body[k] for k in START_KEPT if k in body}
    stripped["facts"] = {"agent.start_refused": why}
    return Envelope(layout.KIND_START, transport.encode(stripped))
