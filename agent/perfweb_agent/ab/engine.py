"""The A/B engine: run a workload with and without knobs, interleaved, and compare them.

Each round runs the command twice, baseline and candidate (ABBA order), each under `perf-agent
attach --offline` into a fresh temporary folder with `PERF_AGENT_MAX_STEPS = warmup + steps`;
the candidate also gets `PERF_AGENT_KNOBS`. Both arms get the same `PERF_AGENT_AB_SEED` (and
PYTHONHASHSEED), so a script that draws its inputs from unseeded generators feeds both arms
the same requests (agent/perfweb_agent/ab/seed.py). The per-step durations (per request for
inference), batch sizes and `workload.kind` come back from the agent's offline batches
(docs/protocol.md, agent/perfweb_agent/ab/offline.py), the peak RSS from the arm's own resource
usage (the largest process of its tree, `wait4`); each arm's warm-up is left out until its step time
settles (at least `warmup` steps; perfweb_contract.ab.decision.settle). For inference the outermost
module's outputs on the first requests of each arm (agent/perfweb_agent/ab/outputs.py) are compared,
the candidate against the baseline of the same round. `perfweb_contract.ab.decision.compare` turns
the rounds into latency, throughput and memory of each arm, the speed-up, its always-valid
95% interval, the output agreement and the verdict (a faster candidate whose results moved
is "faster but changes results").
While the verdict is inconclusive (an interval too wide to decide), the engine adds rounds,
up to `max_rounds` and while the next round still fits in `time_budget_s`; the comparison
says why it stopped.

Every workload runs in its own process group, watched by a tiny guard process that kills the
group the moment its parent (this process) goes away, even by SIGKILL: no orphans.
"""

from __future__ import annotations

import contextlib
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

from perfweb_agent.ab import knobs
from perfweb_agent.ab import loss_probe as abprobe
from perfweb_agent.ab import offline as aboffline
from perfweb_agent.ab import outputs as aboutputs
from perfweb_agent.ab import seed as abseed
from perfweb_contract.ab.decision import compare, paired_round, settle, stop_of
from perfweb_contract.ab.presentation import stop_sentence
from perfweb_contract.ab.results import (
    AGREEMENT_RTOL,
    AGREEMENT_TOP1_MIN,
    INFERENCE,
    Comparison,
    Round,
    combined_kind,
)
from perfweb_contract.knobs import KnobValue, format_knobs, validate_knobs
from perfweb_contract.loaders import ENV_KNOB_LOADER, LOADER_KNOBS

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
    aboutputs.ENV_OUTPUTS_FILE,
    abseed.ENV_SEED,
    ENV_KNOB_LOADER,
)
# The seed both arms of every round get: the same inputs, and the same from run to run.
AB_SEED = 0

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
    agreement_top1: float = AGREEMENT_TOP1_MIN  # output agreement a faster candidate keeps
    agreement_rtol: float = AGREEMENT_RTOL

    def __post_init__(self) -> None:
        if not self.command:
            raise AbError("no command to run")
        self.knobs = validate_knobs(self.knobs)
        if not self.knobs:
            raise AbError("at least one --knob is needed for the candidate")
        if not (2 <= self.rounds <= 50 and 3 <= self.steps <= 10_000 and self.warmup >= 0):
            raise AbError("rounds must be 2..50, steps 3..10000 and warmup >= 0")
        self.max_rounds = self.max_rounds or self.rounds
        if not self.rounds <= self.max_rounds <= 50:
            raise AbError("max rounds must be at least rounds and at most 50")
        if not self.time_budget_s > 0:
            raise AbError("the time budget must be positive")
        check_tolerances(top1=self.agreement_top1, rtol=self.agreement_rtol)


def check_tolerances(*, top1: object, rtol: object) -> None:
    """AbError unless top-1 agreement is a fraction in 0..1 and rtol a number >= 0."""
    if not _real(top1) or not 0.0 <= top1 <= 1.0:  # type: ignore[operator]
        raise AbError("the top-1 agreement tolerance must be a number in 0..1")
    if not _real(rtol) or not 0.0 <= rtol <= 1e6:  # type: ignore[operator]
        raise AbError("the relative tolerance must be a number in 0..1e6")


def _real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Arm:
    """One arm of one round, as measured."""

    round: int
    arm: str
    step_s: list[float]  # per step, warm-up included: the latency of each request for inference
    loss: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    batch_sizes: list[int] | None = None  # per kept step; None: not every one was seen
    peak_rss_bytes: int | None = None
    cuda_max_allocated_bytes: int | None = None
    kind: str = "unknown"  # training | inference | unknown (the run's workload.kind)
    outputs: dict | None = None  # candidate only: agreement with the round's baseline
    captured: list[dict] = field(default_factory=list, repr=False)  # this arm's outputs
    capture_note: str = ""  # why `captured` is empty
    warmup: int = 0  # the fewest steps left out as warm-up (the plan's)
    training_loader: int | None = None  # the DataLoader (its N) that fed the training loop

    def to_dict(self) -> dict:
        """JSON-ready form (progress events of a job)."""
        start, cost = settle(self.step_s, minimum=self.warmup)
        steps = self.step_s[start:]
        return {
            "round": self.round,
            "arm": self.arm,
            "step_s": self.step_s,  # warm-up included (the server settles it again)
            "median_s": statistics.median(steps) if steps else None,  # of the settled steps
            "mean_s": statistics.fmean(steps) if steps else None,
            "warmup_steps": start,
            "warmup_s": cost,
            # per step, warm-up included (the server pairs the window); JSON has no NaN
            "loss": [x if math.isfinite(x) else None for x in self.loss],
            "loss_visible": bool(self.loss),
            "wall_s": self.wall_s,
            "batch_sizes": self.batch_sizes,
            "peak_rss_bytes": self.peak_rss_bytes,
            "cuda_max_allocated_bytes": self.cuda_max_allocated_bytes,
            "kind": self.kind,
            "outputs": self.outputs,
        }


def default_launcher() -> list[str]:
    """The `perf-agent` beside this interpreter (the same install), else `python -m`."""
    script = os.path.join(os.path.dirname(sys.executable), "perf-agent")
    if os.access(script, os.X_OK):
        return [script]
    found = shutil.which("perf-agent")
    return [found] if found else [sys.executable, "-m", "perfweb_agent.cli.main"]


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
    target = KnobTarget()
    started, slowest = clock(), 0.0
    while True:
        round_started = clock()
        rounds.append(
            _measure_round(
                plan,
                len(rounds) + 1,
                on_arm=on_arm,
                cancelled=cancelled,
                launcher=prefix,
                target=target,
            )
        )
        slowest = max(slowest, clock() - round_started)
        if len(rounds) < plan.rounds:
            continue
        result = compare(rounds, top1_min=plan.agreement_top1, rel_max=plan.agreement_rtol)
        out_of_time = clock() - started + slowest > plan.time_budget_s
        stopped = stop_of(
            verdict=result.verdict,
            rounds=len(rounds),
            max_rounds=plan.max_rounds,
            out_of_time=out_of_time,
        )
        if stopped is not None:
            result.stopped = stopped
            result.stop_reason = stop_sentence(
                stopped=stopped,
                verdict=result.verdict,
                rounds=len(rounds),
                max_rounds=plan.max_rounds,
            )
            return result


@dataclass
class KnobTarget:
    """What the candidate's knobs are addressed to, learnt from a baseline arm: the
    DataLoader the training loop waits on (DataLoader knobs change that loader alone)."""

    loader: int | None = None


def _measure_round(
    plan: AbPlan,
    number: int,
    *,
    on_arm: Callable[[Arm], None] | None,
    cancelled: threading.Event | None,
    launcher: list[str],
    target: KnobTarget | None = None,
) -> Round:
    measured: dict[str, Arm] = {}
    # ABBA: odd rounds run the baseline first, even rounds the candidate, so a position
    # effect (what ran just before, a periodic neighbour) falls on both arms alike.
    order = (BASELINE, CANDIDATE) if number % 2 else (CANDIDATE, BASELINE)
    for arm in order:
        measured[arm] = run_arm(
            plan,
            arm=arm,
            round_number=number,
            launcher=launcher,
            cancelled=cancelled,
            loader=target.loader if target is not None else None,
        )
        if arm == BASELINE and target is not None and measured[arm].training_loader is not None:
            target.loader = measured[arm].training_loader
        if arm == BASELINE == order[0] and on_arm is not None:
            on_arm(measured[arm])  # a baseline that ran first is reported at once
    baseline, candidate = measured[BASELINE], measured[CANDIDATE]
    kind = combined_kind([baseline.kind, candidate.kind])
    if kind == INFERENCE:
        note = baseline.capture_note or candidate.capture_note
        candidate.outputs = aboutputs.summary(baseline.captured, candidate.captured, note=note)
    # The candidate's event carries its agreement with this round's baseline, so one that
    # ran first is reported after the baseline has run (both then, in the order they ran).
    if on_arm is not None:
        for arm in order:
            if not arm == BASELINE == order[0]:
                on_arm(measured[arm])
    baseline.captured = candidate.captured = []  # the round is paired: free the outputs
    return paired_round(
        baseline_step_s=baseline.step_s,
        candidate_step_s=candidate.step_s,
        baseline_loss=baseline.loss,
        candidate_loss=candidate.loss,
        warmup=plan.warmup,
        kind=kind,
        baseline_batch_sizes=baseline.batch_sizes,
        candidate_batch_sizes=candidate.batch_sizes,
        baseline_peak_rss_bytes=baseline.peak_rss_bytes,
        candidate_peak_rss_bytes=candidate.peak_rss_bytes,
        baseline_cuda_max_allocated_bytes=baseline.cuda_max_allocated_bytes,
        candidate_cuda_max_allocated_bytes=candidate.cuda_max_allocated_bytes,
        outputs=candidate.outputs,
    )


def arm_env(
    plan: AbPlan, *, arm: str, loss_file: str, outputs_file: str = "", loader: int | None = None
) -> dict[str, str]:
    """The environment of one arm: the caller's, scrubbed, plus the limit, the probes, the
    seed (the same in both arms) and, for the candidate, the knobs; its DataLoader knobs
    addressed to `loader` (the training loop's, as the baseline saw it) where known."""
    env = {k: v for k, v in (plan.env or os.environ).items() if k not in _SCRUBBED_ENV}
    env[knobs.ENV_MAX_STEPS] = str(plan.warmup + plan.steps)
    env["PERF_AGENT_PROFILE"] = "0"  # a profiler window would distort the step times
    env[abprobe.ENV_LOSS_FILE] = loss_file
    if outputs_file:
        env[aboutputs.ENV_OUTPUTS_FILE] = outputs_file
    env[abseed.ENV_SEED] = str(AB_SEED)
    env.setdefault("PYTHONHASHSEED", str(AB_SEED))  # a user's own choice stays
    if arm == CANDIDATE:
        env[knobs.ENV_KNOBS] = format_knobs(plan.knobs)
        if loader is not None and any(name in plan.knobs for name in LOADER_KNOBS):
            env[ENV_KNOB_LOADER] = str(loader)
    return env


def run_arm(
    plan: AbPlan,
    *,
    arm: str,
    round_number: int,
    launcher: Sequence[str],
    cancelled: threading.Event | None = None,
    loader: int | None = None,
) -> Arm:
    """Run the command once under the offline agent and read back what it recorded."""
    with tempfile.TemporaryDirectory(prefix=f"perf-ab-{arm}-") as folder:
        offline = os.path.join(folder, "offline")
        loss_file = os.path.join(folder, "loss.json")
        outputs_file = os.path.join(folder, "outputs.json")
        log_path = os.path.join(folder, "output.log")
        argv = [*launcher, "attach", "--offline", offline, "--", *plan.command]
        started = time.monotonic()
        with open(log_path, "wb") as log:
            code, max_rss = _run_guarded(
                argv,
                env=arm_env(
                    plan, arm=arm, loss_file=loss_file, outputs_file=outputs_file, loader=loader
                ),
                cwd=plan.cwd,
                output=log,
                timeout_s=plan.arm_timeout_s,
                cancelled=cancelled,
            )
        wall = time.monotonic() - started
        if code != 0:
            raise AbError(f"{arm} of round {round_number} exited {code}: {_tail(log_path)}")
        record = aboffline.read_offline(offline)
        steps = record.durations
        if len(steps) - plan.warmup < 3:
            raise AbError(
                f"{arm} of round {round_number} recorded {len(record.durations)} steps; "
                f"need more than the {plan.warmup} warm-up steps plus 3"
            )
        sizes = record.batch_sizes
        captured, note = aboutputs.read_capture(outputs_file)
        peaks = [p for p in (max_rss, record.peak_rss_bytes) if p is not None]
        return Arm(
            round=round_number,
            arm=arm,
            step_s=steps,
            loss=abprobe.read_losses(loss_file),
            wall_s=wall,
            batch_sizes=None if None in sizes else [int(s) for s in sizes if s is not None],
            peak_rss_bytes=max(peaks) if peaks else None,
            cuda_max_allocated_bytes=record.cuda_max_allocated_bytes,
            kind=record.kind,
            captured=captured,
            capture_note=note,
            warmup=plan.warmup,
            training_loader=record.training_loader,
        )


def read_step_durations(offline_dir: str) -> list[float]:
    """Step durations of the lowest rank in an offline directory, in step order."""
    return aboffline.read_offline(offline_dir).durations


def _run_guarded(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    output: IO[bytes],
    timeout_s: float,
    cancelled: threading.Event | None,
) -> tuple[int, int | None]:
    """Run `argv` in a new process group that dies with us; returns its exit code and the
    peak RSS in bytes of the largest process of its tree (None where it cannot tell)."""
    try:
        child = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    except OSError as error:
        raise AbError(f"could not start {argv[0]}: {error}") from None
    guard = subprocess.Popen(
        [sys.executable, "-c", _GUARD_SOURCE, str(child.pid)], stdin=subprocess.PIPE
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ended = _reap(child)
            if ended is not None:
                return ended
            time.sleep(0.05)
            if cancelled is not None and cancelled.is_set():
                raise AbCancelled("cancelled")
            if time.monotonic() > deadline:
                raise AbError(f"the workload ran past {timeout_s:.0f} s")
    finally:
        stop_workload(child)
        assert guard.stdin is not None
        guard.stdin.close()  # the guard sweeps anything left in the group, then exits
        guard.wait()


def _reap(child: subprocess.Popen) -> tuple[int, int | None] | None:
    """(exit code, peak RSS) once `child` has ended, else None; reaps it with wait4.

    wait4 reports the child's own resource usage merged with that of the children it
    waited for (`perf-agent attach` waits for the script, the script for its DataLoader
    workers): its ru_maxrss is the peak RSS of the largest process of the arm.
    """
    try:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: the exit code, without the usage
        code = child.wait()
        return code, None
    if pid == 0:
        return None
    child.returncode = os.waitstatus_to_exitcode(status)
    unit = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return child.returncode, int(usage.ru_maxrss) * unit or None


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
