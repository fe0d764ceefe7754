"""Forked ranks: a child forked from a process with an agent (`os.fork`, multiprocessing's
fork context) reports as a rank of its own once it trains.

At the fork the child's inherited agent is silenced (agent.after_fork_in_child: no thread,
fresh locks, empty buffers), as a DataLoader worker or a helper process must be: nothing of
theirs is sent. Its step timer keeps one question for the child's first training step (an
optimizer step or an outermost backward, which no DataLoader worker takes):

- the agent re-arms in the child with a new identity (agent id, pid, the rank below) and a
  sender of its own, whose threads start there; the hooks the parent installed keep filling
  the same buffers, emptied at the fork, so no torch patch is installed twice;
- the rank is torch.distributed's when the child has joined a process group (the usual
  forked DDP job), else multiprocessing's identity (Process-1 is rank 0), else the child's
  order among its parent's forks;
- the child flushes at exit: atexit for a script that returns, and a wrapped `os._exit`
  (multiprocessing's fork children leave by it, and so do most hand-written `os.fork`
  children), which closes the agent first with a short deadline, then exits as asked.

The parent's GPU and host samples stay the parent's (one process per host samples them);
a forked rank sends its own process numbers, steps, step anatomy and facts. No profiler
window opens in a forked child (Kineto's state does not survive a fork).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

DATALOADER_WORKER = ("torch.utils.data._utils.worker", "_worker_loop")  # its target
MARK = "__perf_agent_wrapped__"
EXIT_DEADLINE_S = 2.0  # at os._exit: what the flush of a forked rank may take at most
EXIT_GRACE_S = 0.5  # past its deadline, how long os._exit still waits for a blocked flush

# Forks this process has made (os.register_at_fork in perfweb_agent): a child holds the count
# from before its own fork, its order among its parent's forks (DataLoader workers included).
_forks = 0


def count_fork_in_parent() -> None:
    """After each fork, in the parent."""
    global _forks
    _forks += 1


def identity() -> tuple[int | None, int | None]:
    """(rank, world size) of this forked child: torch.distributed's if it joined a group,
    else multiprocessing's identity minus one (and no world size), else its order among
    its parent's forks (so that no two forked processes name their series alike)."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a half-made process group: fall back
        pass
    process = sys.modules.get("multiprocessing.process")
    current = getattr(process, "_current_process", None)
    numbers = getattr(current, "_identity", ())
    if numbers and isinstance(numbers[-1], int) and numbers[-1] > 0:
        return numbers[-1] - 1, None
    return _forks, None


def in_dataloader_worker() -> bool:
    """Whether this child is a DataLoader worker (whose dataset may even run a backward, an
    adversarial augmentation): it never reports."""
    process = sys.modules.get("multiprocessing.process")
    target = getattr(getattr(process, "_current_process", None), "_target", None)
    name = (getattr(target, "__module__", ""), getattr(target, "__name__", ""))
    return name == DATALOADER_WORKER


def flush_at_os_exit(close: Callable[[int | None, float | None], None]) -> None:
    """Wrap `os._exit` so that this process's agent is closed before it leaves by it (the
    wrapper does nothing in another process, e.g. a DataLoader worker forked from it).

    The process leaves within EXIT_DEADLINE_S + EXIT_GRACE_S whatever the close meets: it
    runs on a thread of its own, and os._exit does not wait for a close that blocks (a lock
    some thread of the parent held at the fork: nothing in the child will release it)."""
    original: Callable[[int], NoReturn] = getattr(os._exit, "__wrapped__", os._exit)
    owner = os.getpid()

    def _exit(status: int) -> NoReturn:
        if os.getpid() == owner:
            with contextlib.suppress(Exception):  # a guest never breaks its host
                closing = threading.Thread(
                    target=_close_quietly,
                    args=(close, status),
                    name="perf-agent-exit",
                    daemon=True,
                )
                closing.start()
                closing.join(EXIT_DEADLINE_S + EXIT_GRACE_S)
        original(status)

    setattr(_exit, MARK, True)
    _exit.__wrapped__ = original  # type: ignore[attr-defined]
    os._exit = _exit


def _close_quietly(close: Callable[[int | None, float | None], None], status: int) -> None:
    with contextlib.suppress(Exception):  # a guest never breaks its host
        close(status, EXIT_DEADLINE_S)
