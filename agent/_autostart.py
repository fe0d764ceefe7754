"""Start the agent in a process launched by `perf-agent attach` (called by sitecustomize)."""

from __future__ import annotations

import os
import sys

from agent.config import ENV_DISABLE, ENV_LAUNCHED

TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def should_start(argv: list[str] | None = None) -> bool:
    """False for processes that are not the job itself: torchrun's launcher, spawned workers.

    `argv` is the interpreter's original command line (`sys.orig_argv`).
    """
    argv = list(getattr(sys, "orig_argv", sys.argv)) if argv is None else argv
    if os.environ.get(ENV_DISABLE, "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    if not os.environ.get(ENV_LAUNCHED):
        return False
    if "--multiprocessing-fork" in argv:
        return False  # a multiprocessing spawn child (a DataLoader worker)
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


def start_from_env() -> None:
    """Attach from PERF_AGENT_* variables when this process should report."""
    if not should_start():
        return
    import agent
    from agent import knobs  # optimisation jobs: knobs + PERF_AGENT_MAX_STEPS (docs/jobs.md)

    knobs.apply_from_env()
    knobs.register_step_limit(agent.attach())
