"""Spawned ranks: children started by `torch.multiprocessing.spawn` or by `multiprocessing`
with the spawn or forkserver context report as ranks of the run, like torchrun ranks.

Such a child starts as `python -c "from multiprocessing.spawn import spawn_main; ..."
--multiprocessing-fork` (or is forked by the forkserver process), so nothing on its command
line says what it will run. The agent therefore waits until multiprocessing hands the child
its process object (`BaseProcess._bootstrap`), and looks at the target then:

- a DataLoader worker (`torch.utils.data._utils.worker._worker_loop`) stays a worker: no agent;
- anything else that runs torch (a DDP rank, an inference worker pool) gets an agent once
  torch is imported, with rank = the index `mp.spawn` gave it (its first argument), else the
  multiprocessing identity minus one (Process-1 is rank 0);
- at the end of `_bootstrap` the agent flushes (a forkserver child leaves by `os._exit`, with
  no atexit handlers).
"""

from __future__ import annotations

import sys
from typing import Any

from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime.forked import DATALOADER_WORKER

MARK = "__perf_agent_wrapped__"
SPAWN_WRAP = ("torch.multiprocessing.spawn", "_wrap")


def is_spawned_child(argv: list[str]) -> bool:
    """True for a multiprocessing spawn child or the forkserver (whose children fork)."""
    if "--multiprocessing-fork" in argv:
        return True
    if "-c" in argv:
        at = argv.index("-c") + 1
        return at < len(argv) and "multiprocessing.forkserver" in argv[at]
    return False


def _name(target: Any) -> tuple[str, str]:
    return str(getattr(target, "__module__", "")), str(getattr(target, "__name__", ""))


def rank_of(process: Any) -> int | None:
    """The rank of a spawned process: mp.spawn's index, else its identity minus one."""
    target = getattr(process, "_target", None)
    args: tuple[Any, ...] = tuple(getattr(process, "_args", ()))
    if _name(target) == SPAWN_WRAP and len(args) > 1 and isinstance(args[1], int):
        return args[1]
    identity = getattr(process, "_identity", ())
    if identity and isinstance(identity[-1], int):
        return identity[-1] - 1
    return None


def reports(process: Any) -> bool:
    """False for DataLoader workers and for children of a process that has an agent already."""
    import perfweb_agent

    if perfweb_agent.current() is not None:
        return False  # a fork of a process with an agent: that agent is silenced already
    return _name(getattr(process, "_target", None)) != DATALOADER_WORKER


def _start(rank: int | None) -> None:
    import perfweb_agent
    from perfweb_agent.ab import knobs
    from perfweb_agent.core import importhook

    def attach(torch: Any) -> None:
        knobs.apply_from_env()
        running = perfweb_agent.attach(rank=rank)
        knobs.record_applied(running)
        knobs.register_step_limit(running)
        if running is not None and not running.patches.installed:
            running._torch_imported(torch)  # torch was mid-import: hand it over directly

    importhook.when_imported("torch", attach)


def install() -> None:
    """Wrap `BaseProcess._bootstrap` so that the child decides once it knows its target."""
    import multiprocessing.process

    cls = multiprocessing.process.BaseProcess
    original = cls._bootstrap  # type: ignore[attr-defined]
    if getattr(original, MARK, False):
        return

    def _bootstrap(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = False
        try:
            if reports(self):
                _start(rank_of(self))
                started = True
        except Exception as exc:  # noqa: BLE001 - never stop the child from running
            say_once("spawned", "cannot attach the agent to a spawned process: %s", exc)
        code = original(self, *args, **kwargs)
        if started:
            import perfweb_agent

            perfweb_agent.shutdown(exit_code=code if isinstance(code, int) else None)
        return code

    setattr(_bootstrap, MARK, True)
    cls._bootstrap = _bootstrap  # type: ignore[attr-defined]


def running_in_spawned_child() -> bool:
    """True when this interpreter was started as a multiprocessing spawn child."""
    return is_spawned_child(list(getattr(sys, "orig_argv", sys.argv)))
