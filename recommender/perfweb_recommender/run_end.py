"""How a run ended, in a report's words: a failed run's line (exit code or signal, last error),
how a worker process is named, and what the end lost or has not received yet (processes whose
agent never sent, or has not yet delivered, its final data). `coverage.run_coverage` reads them."""

from __future__ import annotations

import signal
from collections.abc import Sequence


def failure_line(*, exit_code: int | None, error: str = "") -> str:
    """ "exit code 1, ModuleNotFoundError: No module named 'x'" for a run that failed (or
    "killed by signal 15 (SIGTERM)"); "" for one that ended well or has not ended."""
    if exit_code is None or exit_code == 0:
        return ""
    if exit_code > 128 or exit_code < 0:
        number = exit_code - 128 if exit_code > 128 else -exit_code
        try:
            how = f"killed by signal {number} ({signal.Signals(number).name})"
        except ValueError:
            how = f"killed by signal {number}"
    else:
        how = f"exit code {exit_code}"
    return f"{how}, {error}" if error else how


def worker_name(rank: int | None, *, workers: int) -> str:
    """How a report names a worker process: "the script" when it is the run's only one and
    has no rank (`perf-agent attach -- python train.py`), else "rank N"."""
    return "the script" if workers == 1 and rank is None else f"rank {rank or 0}"


def ended_early(*, exit_code: int | None, silent: Sequence[str]) -> list[str]:
    """What a finished run's end lost: each process (`silent`: "rank 0", "the script")
    whose agent never sent its final data, and why where the exit status says so
    (128 + N, or -N: killed by signal N). A SIGTERM or SIGKILL ends Python before its
    exit handlers run, so the agent's last seconds of steps and samples and a profiler
    window still open are gone: a report must not read as if it had seen them."""
    how = "ended"
    if exit_code is not None and (exit_code > 128 or exit_code < 0):
        number = exit_code - 128 if exit_code > 128 else -exit_code
        try:
            how = f"was killed by signal {number} ({signal.Signals(number).name})"
        except ValueError:
            how = f"was killed by signal {number}"
    elif exit_code is not None:
        how = f"ended (exit code {exit_code})"
    return [
        f"{who}'s agent sent no final data: its process {how} before the agent could flush, "
        "so the last seconds of its steps and samples, and a profiler window still open, are "
        "missing"
        for who in silent
    ]


def end_unsent(*, waiting: Sequence[str]) -> list[str]:
    """What a finished run's end has not received yet: each process (`waiting`) whose agent
    ended cleanly but could not hand its last requests to a slow or unreachable server before
    its exit deadline, and said so; they wait in the spill directory on its host."""
    return [
        f"{who}'s final data has not reached the server yet: its agent kept its last batches "
        "and its finish in the spill directory on its host, which the next agent there sends "
        "(or `perf-agent upload`)"
        for who in waiting
    ]
