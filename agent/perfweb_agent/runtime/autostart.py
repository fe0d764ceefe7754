"""Start the agent in a process launched by `perf-agent attach` (called by sitecustomize)."""

from __future__ import annotations

import os
import sys

from perfweb_agent.core.config import ENV_DISABLE, ENV_LAUNCHED
from perfweb_agent.runtime import spawned

TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def should_start(argv: list[str] | None = None) -> bool:
    """False for processes that are not the job itself: torchrun's launcher, spawned children
    (which decide later, see agent/perfweb_agent/runtime/spawned.py), multiprocessing's helpers.

    `argv` is the interpreter's original command line (`sys.orig_argv`).
    """
    argv = list(getattr(sys, "orig_argv", sys.argv)) if argv is None else argv
    if not _launched():
        return False
    if "--multiprocessing-fork" in argv:
        return False  # a spawn child: a rank or a DataLoader worker, told at its bootstrap
    if "-c" in argv:
        code = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        if "multiprocessing" in code:
            return False  # resource tracker, forkserver
    if "-m" in argv:
        module = argv[argv.index("-m") + 1] if argv.index("-m") + 1 < len(argv) else ""
        if module in TORCHRUN_MODULES:
            return False
    scripts = [os.path.basename(a) for a in argv[:2]]
    return not any(name in ("torchrun", "torch-run") for name in scripts)


def _launched() -> bool:
    """Started by `perf-agent attach`, and not switched off."""
    if os.environ.get(ENV_DISABLE, "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    return bool(os.environ.get(ENV_LAUNCHED))


def start_from_env() -> None:
    """Attach from PERF_AGENT_* variables when this process should report."""
    if not should_start():
        if _launched() and spawned.running_in_spawned_child():
            spawned.install()  # a rank or a DataLoader worker: known once its target is
        return
    import perfweb_agent
    from perfweb_agent.ab import (
        knobs,  # optimisation jobs: knobs + PERF_AGENT_MAX_STEPS (docs/jobs.md)
    )

    knobs.apply_from_env()
    running = perfweb_agent.attach()
    knobs.record_applied(running)
    knobs.register_step_limit(running)
