"""When the sender may try the server again, and how long it waits for an answer.

Failures back off exponentially with jitter, or as long as a 429's Retry-After says; a
request that timed out doubles the next one's timeout (up to TIMEOUT_MAX_S, or the setting
if that is longer) and quick answers bring it back down to the setting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import say_once
from perfweb_agent.delivery.transport import Reply

TIMEOUT_MAX_S = 120.0  # a server slower than the HTTP timeout: wait up to this long


class Backoff:
    """The network thread's pacing: blocked until when, and each request's timeout."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self.timeout_s = settings.http_timeout  # the next request's
        self.blocked_until = 0.0
        self.rate_limited = False  # the current block is the server's Retry-After
        self.failures = 0

    def blocked(self) -> bool:
        """Whether the server is not to be tried now."""
        return self.clock() < self.blocked_until

    def wait_s(self) -> float:
        """Seconds until the server may be tried again (0 when it may now)."""
        return max(0.0, self.blocked_until - self.clock())

    def timeout(self, deadline: float | None = None) -> float:
        """The next request's timeout, cut short by `deadline` (at least 50 ms)."""
        if deadline is None:
            return self.timeout_s
        return min(self.timeout_s, max(0.05, deadline - self.clock()))

    def answered(self, reply: Reply, *, elapsed: float, timeout: float) -> None:
        """Adapt the timeout to how long this server took to answer (or not)."""
        setting = self.settings.http_timeout
        if reply.timed_out and timeout >= self.timeout_s:
            self.timeout_s = min(max(setting, TIMEOUT_MAX_S), self.timeout_s * 2)
            say_once(
                "slow-server",
                "server did not answer within %.0f s; waiting longer (up to %.0f s) from now "
                "on, sampling goes on",
                timeout,
                self.timeout_s,
            )
        elif reply.status:
            self.timeout_s = max(setting, min(self.timeout_s, elapsed * 4))

    def succeeded(self) -> None:
        """The server took a request: the next failure starts from the base delay."""
        self.failures = 0

    def failed(self, reply: Reply) -> None:
        """A transient failure: block for Retry-After, or an exponential, jittered delay."""
        self.failures += 1
        self.rate_limited = reply.status == 429 and reply.retry_after is not None
        if self.rate_limited:
            delay = reply.retry_after or 0.0
        else:
            base = self.settings.backoff_base * 2 ** min(self.failures - 1, 16)
            delay = min(self.settings.backoff_max, base) * random.uniform(0.5, 1.5)
        self.blocked_until = self.clock() + delay
        say_once(
            "transient",
            "server not answering (%s); retrying, nothing is lost",
            reply.error or reply.status,
        )

    def last_try(self) -> None:
        """At exit: one prompt last try whatever the backoff said, unless the server asked
        to wait (Retry-After)."""
        if not self.rate_limited:
            self.blocked_until = 0.0
