"""The agent's logger: a guest speaks rarely, on stderr, with a recognisable prefix."""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("perf_agent")

_said: set[str] = set()


def _configure() -> None:
    if log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[perf-agent] %(message)s"))
    log.addHandler(handler)
    log.propagate = False
    level = os.environ.get("PERF_AGENT_LOG_LEVEL", "WARNING").upper()
    log.setLevel(getattr(logging, level, logging.WARNING))


def say_once(key: str, message: str, *args: object, level: int = logging.WARNING) -> None:
    """Log `message` the first time `key` is seen in this process, never again."""
    if key in _said:
        return
    _said.add(key)
    log.log(level, message, *args)


def silence(*keys: str) -> None:
    """Mark `keys` as already said (a caller that reports the same thing its own way)."""
    _said.update(keys)


_configure()
