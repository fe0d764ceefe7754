"""Past the exit deadline: what the server did not take stays on this host, and it is told.

The closing thread spills what is still unsent (the head too when a request for it is still
in flight: the server drops what it already has) and, with the finish among it, sends one
heartbeat that says so (`unsent`, docs/protocol.md), so that the server's lost-run sweep
waits for the finish instead of marking the run lost. Its answer is not awaited past the
deadline (a slow server still reads it).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import log
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.outbox import Outbox
from perfweb_agent.delivery.transport import PostFn
from perfweb_contract import api
from perfweb_contract.layout import Envelope


def keep_unsent(
    outbox: Outbox,
    *,
    settings: Settings,
    agent_id: str,
    finish: Envelope | None,
    post: PostFn,
    timeout: Callable[[], float],
    wall: Callable[[], float],
) -> None:
    """Spill what `outbox` still holds and, if the finish is among it, say so before
    `timeout()` runs out."""
    if not len(outbox) or not settings.server:
        return
    outbox.spill_all()
    if not outbox.spilled:
        return  # nowhere to keep it (counted as dropped)
    log.warning(
        "the server did not take everything before the exit deadline: %d request(s) kept in "
        "%s; the next agent on this host sends them once the server answers (or now: "
        "perf-agent upload %s)",
        outbox.spilled,
        outbox.spill_folder,
        settings.effective_spill_dir(),
    )
    if finish is None:
        return
    left = timeout()
    if left <= 0:
        return
    body = json.loads(gzip.decompress(finish.gz))
    unsent = {
        "requests": len(outbox),
        "exit_code": body.get("exit_code"),
        "final": body.get("final") is True,
    }
    heartbeat = {
        "run_id": settings.run_id,
        "agent_id": agent_id,
        "sent_at": wall(),
        "unsent": unsent,
    }
    payload = transport.encode(heartbeat)
    reply = post(settings.server, api.HEARTBEAT_PATH, settings.token, payload, left)
    log.info("told the server the finish waits on this host (%s)", reply.status or reply.error)
