"""The A/B engine: run a workload with and without knobs, interleaved, and compare step times.

Each round runs the command twice, baseline and candidate (ABBA order), each under `perf-agent
attach --offline` into a fresh temporary folder with `PERF_AGENT_MAX_STEPS = warmup + steps`;
the candidate also gets `PERF_AGENT_KNOBS`. The per-step durations come back from the agent's
offline batches (docs/protocol.md), the first `warmup` steps are discarded, and
`agent.abstats.compare` turns the rounds into medians, speedup, a bootstrap CI and a verdict.
While the verdict is inconclusive (an interval too wide to decide), the engine adds rounds,
up to `max_rounds` and while the next round still fits in `time_budget_s`; the comparison
says why it stopped.

Every workload runs in its own process group, watched by a tiny guard process that kills the
group the moment its parent (this process) goes away, even by SIGKILL: no orphans.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from agent import abprobe, knobs
from agent.abstats import Comparison, Round, compare, paired_round, stop_of, stop_sentence
from agent.knobs import KnobValue

BASELINE = "baseline"
CANDIDATE = "candidate"

# Settings a round must not inherit from whoever started the A/B run.
_SCRUBBED_ENV = (
    "PERF_AGENT_SERVER",
    "PERF_AGENT_TOKEN",
    "PERF_AGENT_RUN_ID",
    "PERF_AGENT_OFFLINE",
    "PERF_AGENT_LAUNCHED",
    knobs.ENV_KNOBS,
    knobs.ENV_MAX_STEPS,
    abprobe.ENV_LOSS_FILE,
)

_GUARD_SOURCE = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "sys.stdin.buffer.read()\n"
    "try:\n    os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
    "except OSError:\n    pass\n"
)


class AbError(RuntimeError):
    """A round could not be measured (the workload failed, timed out or was cancelled)."""


class AbCancelled(AbError):
    """The measurement was cancelled; the workload was killed."""


@dataclass
class AbPlan:
    """What to measure: the command, the candidate's knobs and the size of the experiment."""

    command: list[str]
    knobs: dict[str, KnobValue]
    rounds: int = 5
    steps: int = 20
    warmup: int = 3
    cwd: str | None = None
    arm_timeout_s: float = 600.0
    env: Mapping[str, str] | None = None
    max_rounds: int = 0  # rounds to add while inconclusive; 0: exactly `rounds`
    time_budget_s: float = 3600.0  # no extra round starts that would end past this

    def __post_init__(self) -> None:
        if not self.command:
            raise AbError("no command to run")
        self.knobs = knobs.validate_knobs(self.knobs)
        if not self.knobs:
            raise AbError("at least one --knob is needed for the candidate")
        if not (1 <= self.rounds <= 50 and 3 <= self.steps <= 10_000 and self.warmup >= 0):
            raise AbError("rounds must be 1..50, steps 3..10000 and warmup >= 0")
        self.max_rounds = self.max_rounds or self.rounds
        if not self.rounds <= self.max_rounds <= 50:
            raise AbError("max rounds must be at least rounds and at most 50")
        if not self.time_budget_s > 0:
            raise AbError("the time budget must be positive")


@dataclass
class Arm:
    """One arm of one round, as measured."""

    round: int
    arm: str
    step_s: list[float]
    loss: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        """JSON-ready form (progress events of a job)."""
        steps = self.step_s
        return {
            "round": self.round,
            "arm": self.arm,
            "step_s": steps,
            "median_s": statistics.median(steps) if steps else None,
            "mean_s": statistics.fmean(steps) if steps else None,
            # per step, warm-up included (the server pairs the window); JSON has no NaN
            "loss": [x if math.isfinite(x) else None for x in self.loss],
            "loss_visible": bool(self.loss),
            "wall_s": self.wall_s,
        }


def default_launcher() -> list[str]:
    """The `perf-agent` beside this interpreter (the same install), else `python -m`."""
    script = os.path.join(os.path.dirname(sys.executable), "perf-agent")
    if os.access(script, os.X_OK):
        return [script]
    found = shutil.which("perf-agent")
    return [found] if found else [sys.executable, "-m", "agent.cli"]


def run_ab(
    plan: AbPlan,
    *,
    on_arm: Callable[[Arm], None] | None = None,
    cancelled: threading.Event | None = None,
    launcher: Sequence[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Comparison:
    """Measure `plan`: interleaved rounds, then the comparison. Raises AbError on failure.

    After `plan.rounds` rounds, another round runs while the verdict is inconclusive, the
    round limit is not reached and the next round (as long as the slowest so far) still ends
    within `plan.time_budget_s` of the start.
    """
    prefix = list(launcher or default_launcher())
    rounds: list[Round] = []
    started, slowest = clock(), 0.0
    while True:
        round_started = clock()
        rounds.append(
            _measure_round(plan, len(rounds) + 1, on_arm=on_arm, cancelled=cancelled,
                           launcher=prefix)
        )  # fmt: skip
        slowest = max(slowest, clock() - round_started)
        if len(rounds) < plan.rounds:
            continue
        result = compare(rounds)
        out_of_time = clock() - started + slowest > plan.time_budget_s
        stopped = stop_of(
            verdict=result.verdict, rounds=len(rounds), max_rounds=plan.max_rounds,
            out_of_time=out_of_time,
        )  # fmt: skip
        if stopped is not None:
            result.stopped = stopped
            result.stop_reason = stop_sentence(
                stopped=stopped, verdict=result.verdict, rounds=len(rounds),
                max_rounds=plan.max_rounds,
            )  # fmt: skip
            return result


def _measure_round(
    plan: AbPlan,
    number: int,
    *,
    on_arm: Callable[[Arm], None] | None,
    cancelled: threading.Event | None,
    launcher: list[str],
) -> Round:
    measured = {}
    # ABBA: odd rounds run the baseline first, even rounds the candidate, so a position
    # effect (what ran just before, a periodic neighbour) falls on both arms alike.
    order = (BASELINE, CANDIDATE) if number % 2 else (CANDIDATE, BASELINE)
    for arm in order:
        result = run_arm(plan, arm=arm, round_number=number, launcher=launcher, cancelled=cancelled)
        measured[arm] = result
        if on_arm is not None:
            on_arm(result)
    baseline, candidate = measured[BASELINE], measured[CANDIDATE]
    return paired_round(
        baseline_step_s=baseline.step_s, candidate_step_s=candidate.step_s,
        baseline_loss=baseline.loss, candidate_loss=candidate.loss, warmup=plan.warmup,
    )  # fmt: skip


def arm_env(plan: AbPlan, *, arm: str, loss_file: str) -> dict[str, str]:
    """The environment of one arm: the caller's, scrubbed, plus the limit and knobs."""
    env = {k: v for k, v in (plan.env or os.environ).items() if k not in _SCRUBBED_ENV}
    env[knobs.ENV_MAX_STEPS] = str(plan.warmup + plan.steps)
    env["PERF_AGENT_PROFILE"] = "0"  # a profiler window would distort the step times
    env[abprobe.ENV_LOSS_FILE] = loss_file
    if arm == CANDIDATE:
        env[knobs.ENV_KNOBS] = knobs.format_knobs(plan.knobs)
    return env


def run_arm(
    plan: AbPlan,
    *,
    arm: str,
    round_number: int,
    launcher: Sequence[str],
    cancelled: threading.Event | None = None,
) -> Arm:
    """Run the command once under the offline agent and read back its kept step times."""
    with tempfile.TemporaryDirectory(prefix=f"perf-ab-{arm}-") as folder:
        offline = os.path.join(folder, "offline")
        loss_file = os.path.join(folder, "loss.json")
        log_path = os.path.join(folder, "output.log")
        argv = [*launcher, "attach", "--offline", offline, "--", *plan.command]
        started = time.monotonic()
        with open(log_path, "wb") as log:
            code = _run_guarded(
                argv,
                env=arm_env(plan, arm=arm, loss_file=loss_file),
                cwd=plan.cwd,
                output=log,
                timeout_s=plan.arm_timeout_s,
                cancelled=cancelled,
            )
        wall = time.monotonic() - started
        if code != 0:
            raise AbError(f"{arm} of round {round_number} exited {code}: {_tail(log_path)}")
        durations = read_step_durations(offline)
        kept = durations[plan.warmup :]
        if len(kept) < 3:
            raise AbError(
                f"{arm} of round {round_number} recorded {len(durations)} steps; "
                f"need more than the {plan.warmup} warm-up steps plus 3"
            )
        loss = abprobe.read_losses(loss_file)
        return Arm(round=round_number, arm=arm, step_s=kept, loss=loss, wall_s=wall)


def read_step_durations(offline_dir: str) -> list[float]:
    """Step durations of the lowest rank in an offline directory, in step order."""
    by_rank: dict[int, dict[int, float]] = {}
    for root, _dirs, files in os.walk(offline_dir):
        for name in files:
            if not (name.startswith("batch-") and name.endswith(".json.gz")):
                continue
            try:
                with gzip.open(os.path.join(root, name)) as handle:
                    body = json.load(handle)
            except (OSError, ValueError):
                continue
            steps = body.get("steps") if isinstance(body, dict) else None
            if not isinstance(steps, dict):
                continue
            rank = steps.get("rank") or 0
            indexes, durations = steps.get("index") or [], steps.get("duration") or []
            by_rank.setdefault(int(rank), {}).update(zip(indexes, durations, strict=False))
    if not by_rank:
        return []
    steps_of_rank = by_rank[min(by_rank)]
    return [float(steps_of_rank[i]) for i in sorted(steps_of_rank)]


def _run_guarded(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    output: IO[bytes],
    timeout_s: float,
    cancelled: threading.Event | None,
) -> int:
    """Run `argv` in a new process group that dies with us; returns its exit code."""
    try:
        child = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
            start_new_session=True,
        )  # fmt: skip
    except OSError as error:
        raise AbError(f"could not start {argv[0]}: {error}") from None
    guard = subprocess.Popen(
        [sys.executable, "-c", _GUARD_SOURCE, str(child.pid)], stdin=subprocess.PIPE
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if cancelled is not None and cancelled.is_set():
                raise AbCancelled("cancelled")
            if time.monotonic() > deadline:
                raise AbError(f"the workload ran past {timeout_s:.0f} s")
    finally:
        stop_workload(child)
        assert guard.stdin is not None
        guard.stdin.close()  # the guard sweeps anything left in the group, then exits
        guard.wait()


def stop_workload(child: subprocess.Popen, *, grace_s: float = 3.0) -> None:
    """End a workload's process group: SIGTERM, then SIGKILL after `grace_s`; reap it.

    A workload that already exited may leave children (DataLoader workers) in its group:
    they are killed too. The group id cannot be reused while any member is alive.
    """
    if child.poll() is None:
        _signal_group(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(child.pid, signal.SIGKILL)
            child.wait()
    _signal_group(child.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signum)


def _tail(path: str, limit: int = 400) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
