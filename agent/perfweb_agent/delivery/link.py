"""The agent's link to its server: one request at a time, and what each answer means.

A 2xx takes the request off the outbox (a 409 to a start too: the run is there already)
and runs the commands the server attached; a transient failure (unreachable, 408, 429,
5xx) backs off (perfweb_agent.delivery.backoff) and keeps it at the head; a refused token
stops all sending; any other 4xx refuses this one request for good
(perfweb_agent.delivery.rejections). The start's answer says whether the server reads
packed arrays.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import log, say_once
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.backoff import Backoff
from perfweb_agent.delivery.outbox import Outbox
from perfweb_agent.delivery.rejections import Rejections
from perfweb_agent.delivery.transport import PostFn, Reply
from perfweb_contract import api, layout, protocol
from perfweb_contract.layout import Envelope


class Link:
    """Requests to the server, their timeouts and backoff, and the state their answers
    leave: last contact, packed arrays, refused requests, a refused token."""

    def __init__(
        self,
        settings: Settings,
        agent_id: str,
        *,
        outbox: Outbox,
        post: PostFn,
        on_command: Callable[[dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.outbox = outbox
        self.backoff = Backoff(settings, clock)
        self.rejections = Rejections()  # requests the server refused for good (4xx)
        self._post = post
        self._on_command = on_command
        self._clock = clock
        self._wall = wall
        self.packed = False  # the server said it reads packed arrays (start's answer)
        self.in_flight = False  # a request is waiting for its answer
        self.answered = False  # the server took one of our requests
        self.last_contact = clock()
        self.token_refused = False  # 401/403: nothing this agent sends will be taken

    def request(self, path: str, gz: bytes, deadline: float | None = None) -> Reply:
        """One POST, its timeout adapted to how long this server takes to answer."""
        timeout = self.backoff.timeout(deadline)
        began = self._clock()
        self.in_flight = True
        try:
            reply = self._post(self.settings.server or "", path, self.settings.token, gz, timeout)
        finally:
            self.in_flight = False
        self.backoff.answered(reply, elapsed=self._clock() - began, timeout=timeout)
        return reply

    def deliver(self, envelope: Envelope, deadline: float | None) -> bool:
        """Send the outbox's head `envelope`; True when it left the queue."""
        reply = self.request(transport.PATHS[envelope.kind], envelope.gz, deadline)
        now = self._clock()
        if envelope.kind == layout.KIND_START and reply.ok:
            features = reply.body.get("features") if isinstance(reply.body, dict) else None
            self.packed = isinstance(features, list) and (
                protocol.FEATURE_PACKED_ARRAYS in features
            )
        if reply.status == 409 and envelope.kind == layout.KIND_START:
            # The run is there already (a start of ours stored before its answer was lost,
            # or another launcher's): what follows belongs to it.
            log.info("server already has this run (409 to start); sending goes on")
            reply = Reply(200, reply.body)
        if reply.ok:
            self.outbox.pop()
            self.backoff.succeeded()
            self._answered_at(now, reply)
            return True
        if reply.transient:
            self.backoff.failed(reply)
            return False
        if reply.refused_token:
            self._refuse_token(reply)
            self.outbox.drop_all()
            return False
        self.last_contact = now
        instead = self.rejections.refused(envelope, reply)
        if instead is not None:
            self.outbox.replace_head(instead)
        else:
            self.outbox.pop(delivered=False)
        return True

    def heartbeat(self) -> None:
        """Say the agent is alive when nothing else was sent for `heartbeat_after`."""
        now = self._clock()
        if now - self.last_contact < self.settings.heartbeat_after or self.backoff.blocked():
            return
        body = {"run_id": self.settings.run_id, "agent_id": self.agent_id, "sent_at": self._wall()}
        reply = self.request(api.HEARTBEAT_PATH, transport.encode(body))
        self.last_contact = now  # on failure: try again one heartbeat period later
        if reply.ok:
            self._answered_at(now, reply)
        elif reply.refused_token:
            self._refuse_token(reply)

    def _answered_at(self, now: float, reply: Reply) -> None:
        self.last_contact = now
        self.answered = True
        for command in reply.commands:
            if self._on_command is None:
                continue
            try:
                self._on_command(command)
            except Exception as exc:  # noqa: BLE001
                say_once("command-error", "command %r failed: %s", command.get("type"), exc)

    def _refuse_token(self, reply: Reply) -> None:
        say_once("auth", "server refused the token (%s); sending stops", reply.status)
        self.token_refused = True
