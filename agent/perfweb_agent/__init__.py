"""perf-agent: streams a PyTorch process's GPU, process and step statistics to perfweb.

In a script::

    import perfweb_agent
    perfweb_agent.attach(server="http://perfweb:8000", token="...")   # or offline="runs/"
    ...
    for batch in loader:        # steps are timed from optimizer hooks by themselves;
        model(batch)
        perfweb_agent.step()            # loops without an optimizer mark steps by hand
        perfweb_agent.log(loss=loss.item(), tokens=n)   # scalars of your own, drawn on the timeline

Or with no edit at all: ``perf-agent attach --server URL --token T -- python train.py``.
Every setting also comes from ``PERF_AGENT_*`` environment variables (see agent/README.md).
The agent never raises into the script: on any internal error it logs one line and goes on.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from perfweb_agent.core.logger import log as _log
from perfweb_agent.runtime import forked as _forked

__all__ = ["attach", "step", "log", "phase", "shutdown", "current"]

_lock = threading.Lock()
_agent: Any = None
_exit_code: int | None = None


def current() -> Any:
    """The agent running in this process, or None."""
    return _agent


def attach(
    server: str | None = None,
    token: str | None = None,
    *,
    offline: str | os.PathLike[str] | None = None,
    name: str | None = None,
    tags: dict[str, str] | list[str] | str | None = None,
    interval: float | None = None,
    **options: Any,
) -> Any:
    """Start the agent in this process (once; later calls return the same agent).

    Arguments override the `PERF_AGENT_*` environment variables. With neither a server nor
    an offline directory the agent is not started and None is returned. Never raises.
    """
    global _agent
    try:
        with _lock:
            if _agent is not None:
                return _agent
            from perfweb_agent.core.config import load_settings
            from perfweb_agent.runtime.agent import Agent

            settings = load_settings(
                server=server,
                token=token,
                offline=offline,
                name=name,
                tags=tags,
                interval=interval,
                **options,
            )
            if not settings.online and not settings.offline:
                _log.warning("attach: no server and no offline directory given; agent not started")
                return None
            agent = Agent(settings)
            agent.start()
            _agent = agent
            _track_exit_code()
            return agent
    except Exception as exc:  # noqa: BLE001 - a guest never breaks its host
        _log.warning("attach failed (%s); the script goes on without the agent", exc)
        return None


def step() -> None:
    """Mark the end of one step (for loops with no optimizer, e.g. inference)."""
    agent = _agent
    if agent is not None:
        agent.step()


def log(**scalars: Any) -> None:
    """Record scalars of the script's own (`perfweb_agent.log(loss=0.41, tokens=4096)`) at this
    time.

    Each becomes the series `scalar.<name>` of this rank, stored with the run and drawn as a
    row of the run's timeline. Names: 1-56 characters `a-z 0-9 _ .` starting with a letter;
    at most 64 names per process. Values: finite numbers (int, float, numpy scalars,
    1-element tensors; a CUDA tensor waits for the GPU, as `.item()` does). Anything else is
    dropped with one warning per name. Without an agent it does nothing. Never raises.
    """
    agent = _agent
    if agent is not None:
        try:
            agent.log(scalars)
        except Exception as exc:  # noqa: BLE001 - a guest never breaks its host
            _log.warning("log failed (%s); the script goes on", exc)


def phase(name: str) -> None:
    """Mark that the script enters a phase now: "train", "eval", "test", "predict" or
    "none". The timeline shades each phase; the framework callbacks call it for you."""
    agent = _agent
    if agent is not None:
        try:
            agent.phase(name)
        except Exception as exc:  # noqa: BLE001
            _log.warning("phase failed (%s); the script goes on", exc)


def shutdown(exit_code: int | None = None, deadline_s: float | None = None) -> None:
    """Flush and stop the agent now (it also happens by itself at exit)."""
    agent = _agent
    if agent is not None:
        try:
            agent.close(exit_code if exit_code is not None else _exit_code, deadline_s)
        except Exception as exc:  # noqa: BLE001
            _log.warning("shutdown failed: %s", exc)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    agent = _agent
    if agent is not None:
        agent.after_fork_in_child()


def _track_exit_code() -> None:
    """Learn the script's exit code from sys.exit and uncaught exceptions, for `finish`.

    (A bare `raise SystemExit(n)` is invisible from inside; the launcher still knows it.)
    """
    original_exit, original_hook = sys.exit, sys.excepthook

    def exit(code: Any = None) -> None:  # type: ignore[misc]
        global _exit_code
        _exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        _set_exit_code(_exit_code)
        original_exit(code)

    def excepthook(kind: Any, value: Any, tb: Any) -> None:
        _set_exit_code(1)
        original_hook(kind, value, tb)

    sys.exit = exit  # type: ignore[assignment]
    sys.excepthook = excepthook


def _set_exit_code(code: int) -> None:
    agent = _agent
    if agent is not None:
        agent.exit_code = code


def _after_fork_in_parent() -> None:
    _forked.count_fork_in_parent()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child, after_in_parent=_after_fork_in_parent)
