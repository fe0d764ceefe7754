"""`perf-agent attach`: run a command with the agent inside it, untouched otherwise.

The launcher runs the command with a `sitecustomize` directory first on PYTHONPATH (which
starts an agent inside every Python process of the job, torchrun ranks included, all
reporting into the same run id), forwards signals, registers the run (`start`, role
launcher) and ends it (`finish`, final, with the command's exit code), which it exits with.

The command starts first: the launcher's own agent (its delivery, HTTP included) is
imported and started while the command's interpreter starts, not before, so that an
attached script begins within a few tens of milliseconds of a bare one. A launcher agent
that cannot start never keeps the command from running nor changes its exit status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from types import FrameType
from typing import TYPE_CHECKING

from perfweb_agent.core.config import Settings, settings_env
from perfweb_agent.core.logger import log

if TYPE_CHECKING:
    from perfweb_agent.delivery.sender import PostFn
    from perfweb_agent.runtime.agent import Agent

# the package's own folder (agent/perfweb_agent/ in a checkout, perfweb_agent/ when installed)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOT_DIR = os.path.join(PACKAGE_DIR, "_boot")
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
TERMINAL_SIGNALS = ("SIGINT", "SIGQUIT")  # a terminal sends these to the whole group


def child_env(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The command's environment: ours plus the agent's settings and the boot directory."""
    env = dict(os.environ if base is None else base)
    env.update(settings_env(settings))
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + existing if existing else "")
    env["PERF_AGENT_HOME"] = PACKAGE_DIR
    return env


def exit_status(returncode: int) -> int:
    """A shell-style exit status: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _terminal_signalled_group() -> bool:
    """True when our process group owns the terminal: a Ctrl-C reached the child too."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def _install_forwarding(child: subprocess.Popen[bytes]) -> dict[int, object]:
    previous: dict[int, object] = {}

    def forward(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if name in TERMINAL_SIGNALS and _terminal_signalled_group():
            return  # the child got it from the terminal already; do not double it
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for name in FORWARDED:
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, forward)
    return previous


def run_attached(settings: Settings, command: list[str], *, post: PostFn | None = None) -> int:
    """Run `command` under the agent; return its exit status. The run ends with it."""
    try:
        child = subprocess.Popen(command, env=child_env(settings))  # noqa: S603
    except OSError as exc:
        sys.stderr.write(f"perf-agent: cannot run {command[0]!r}: {exc}\n")
        _end(_launcher(settings, command, post), 127)
        return 127
    previous = _install_forwarding(child)
    try:
        launcher = _launcher(settings, command, post)  # while the command starts up
        returncode = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
    status = exit_status(returncode)
    _end(launcher, status)
    return status


def _launcher(settings: Settings, command: list[str], post: PostFn | None) -> Agent | None:
    """The launcher's agent, started: it registers the run and will end it."""
    try:
        from perfweb_agent.delivery import transport
        from perfweb_agent.runtime.agent import Agent
        from perfweb_contract import protocol

        launcher = Agent(
            settings,
            role=protocol.ROLE_LAUNCHER,
            command=command,
            collect=False,
            post=transport.post if post is None else post,
        )
        launcher.start()
    except Exception as exc:  # noqa: BLE001 - the command runs on without its launcher's agent
        log.warning("the launcher's agent could not start (%s); the run may lack its end", exc)
        return None
    return launcher


def _end(launcher: Agent | None, status: int) -> None:
    if launcher is not None:
        launcher.close(exit_code=status)
