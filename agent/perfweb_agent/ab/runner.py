"""`perf-agent runner`: takes optimisation jobs for this host and measures them A/B.

    perf-agent runner --server URL --token TOKEN

It polls `POST /api/v1/jobs/claim` for jobs queued for `socket.gethostname()`, and for each:
re-validates the job locally (the security promise: only a command an agent recorded on this
host for this project, in the recorded directory, with knobs from the closed list and sizes
and output-agreement tolerances in range; anything else is refused and reported as failed),
runs it under the A/B engine, streams each measured arm as a progress event (`Arm.to_dict()`:
step times, loss, batch sizes, peak memory, kind and the candidate's output agreement; the
reply says whether the job was cancelled), and posts the result or the failure. A heartbeat
keeps the claim alive while a round runs; if the runner dies, the workload's guard kills its
process group and the server fails the job when the claim expires.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from types import FrameType
from typing import Any

from perfweb_agent.ab import ledger
from perfweb_agent.ab.engine import AbCancelled, AbError, AbPlan, Arm, check_tolerances, run_ab
from perfweb_agent.delivery import transport
from perfweb_contract import api
from perfweb_contract.ab.results import AGREEMENT_RTOL, AGREEMENT_TOP1_MIN
from perfweb_contract.jobs import MAX_ROUNDS, SIZE_LIMITS
from perfweb_contract.knobs import KnobError, KnobValue, validate_knobs


class Refused(Exception):
    """A job that this runner will not run; the message says why, in one line."""


@dataclass
class JobSpec:
    """A job after local validation: everything comes from the ledger or the closed list."""

    job_id: int
    claim_token: str
    run_id: str
    command: list[str]
    cwd: str
    knobs: dict[str, KnobValue]
    rounds: int
    steps: int
    warmup: int
    max_rounds: int = 0  # 0: exactly `rounds`
    time_budget_s: float = 1800.0
    agreement_top1: float = AGREEMENT_TOP1_MIN  # output agreement a faster fix must keep
    agreement_rtol: float = AGREEMENT_RTOL


def _adaptive_sizes(job: dict[str, Any], rounds: int) -> tuple[int, float]:
    """The job's round limit and time budget (an older server sends neither: no extra round)."""
    max_rounds = job.get("max_rounds", rounds)
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int):
        raise Refused("max_rounds must be a whole number")
    if not rounds <= max_rounds <= MAX_ROUNDS:
        raise Refused(f"max_rounds must be in {rounds}..{MAX_ROUNDS}")
    budget = job.get("time_budget_s", 1800.0)
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not 0 < budget <= 86400:
        raise Refused("time_budget_s must be a number of seconds in (0, 86400]")
    return max_rounds, float(budget)


def _tolerances(job: dict[str, Any]) -> tuple[float, float]:
    """The job's output-agreement tolerance (an older server sends none: the defaults)."""
    top1 = job.get("agreement_top1", AGREEMENT_TOP1_MIN)
    rtol = job.get("agreement_rtol", AGREEMENT_RTOL)
    try:
        check_tolerances(top1=top1, rtol=rtol)
    except AbError as error:
        name = "agreement_top1" if "top-1" in str(error) else "agreement_rtol"
        raise Refused(f"{name}: {error}") from None
    return float(top1), float(rtol)


def validate_job(
    job: dict[str, Any], *, server: str, token: str, host: str, ledger_file: str | None = None
) -> JobSpec:
    """Check a claimed job against this host's ledger and the closed list; Refused if not."""
    run_id = str(job.get("run_id") or "")
    if job.get("host") != host:
        raise Refused(f"the job is for host {job.get('host')!r}, this runner is on {host!r}")
    entry = ledger.find_entry(server=server, token=token, run_id=run_id, path=ledger_file)
    if entry is None:
        raise Refused(f"run {run_id} was not recorded by an agent on {host} for this project")
    if job.get("command") != entry.command:
        raise Refused("the job's command is not the command the agent recorded for this run")
    if job.get("cwd") != entry.cwd:
        raise Refused("the job's directory is not the one the agent recorded for this run")
    try:
        knobs = validate_knobs(job.get("knobs") or {})
    except KnobError as error:
        raise Refused(str(error)) from None
    if not knobs:
        raise Refused("the job has no knob to try")
    sizes = {}
    for name, (low, high) in SIZE_LIMITS.items():
        value = job.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise Refused(f"{name} must be a whole number in {low}..{high}")
        sizes[name] = value
    max_rounds, budget = _adaptive_sizes(job, sizes["rounds"])
    top1, rtol = _tolerances(job)
    return JobSpec(
        max_rounds=max_rounds,
        time_budget_s=budget,
        agreement_top1=top1,
        agreement_rtol=rtol,
        job_id=int(job["id"]),
        claim_token=str(job.get("claim_token") or ""),
        run_id=run_id,
        command=entry.command,
        cwd=entry.cwd,
        knobs=knobs,
        **sizes,
    )


class Client:
    """The runner's side of the jobs API: JSON with the project token, through the agent's
    one HTTP exchange (perfweb_agent.delivery.transport)."""

    def __init__(self, server: str, token: str, *, timeout: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout

    def post(self, path: str, body: dict[str, Any]) -> transport.Reply:
        """POST `body`; never raises (status 0: the server could not be reached)."""
        return transport.post_json(self.server, path, self.token, body, self.timeout)


class Runner:
    """Claims and runs jobs, one at a time."""

    def __init__(
        self,
        server: str,
        token: str,
        *,
        host: str | None = None,
        poll_s: float = 5.0,
        heartbeat_s: float = 10.0,
        ledger_file: str | None = None,
        launcher: list[str] | None = None,
        out: Any = None,
    ) -> None:
        self.client = Client(server, token)
        self.server, self.token = server, token
        self.host = host or socket.gethostname()
        self.runner_id = uuid.uuid4().hex
        self.poll_s = poll_s
        self.heartbeat_s = heartbeat_s
        self.ledger_file = ledger_file
        self.launcher = launcher
        self.stopping = threading.Event()
        self.cancel = threading.Event()
        self.out = out or sys.stderr

    def say(self, message: str) -> None:
        """One line of the runner's log."""
        self.out.write(f"[perf-agent runner] {message}\n")
        self.out.flush()

    def serve(self, *, once: bool = False) -> int:
        """Poll and run jobs until stopped (or after one job with `once`)."""
        self.say(f"taking jobs for host {self.host} from {self.server}")
        refused = ""
        while not self.stopping.is_set():
            answer = self.client.post(
                api.JOBS_CLAIM_PATH, {"host": self.host, "runner_id": self.runner_id}
            )
            if answer.status == 0:
                self.say(f"server unreachable ({answer.error}); retrying")
                self.stopping.wait(self.poll_s)
                continue
            status, reply = answer.status, answer.body
            if status == 401:
                self.say("the server refused the token")
                return 2
            if status == 403 and reply.get("error") != refused:
                refused = str(reply.get("error") or "the server refused the claim")
                self.say(f"{refused}; retrying")  # once: no agent has recorded this host yet
            job = reply.get("job") if status == 200 else None
            if job:
                self.handle(job)
                if once:
                    return 0
            else:
                self.stopping.wait(self.poll_s)
        return 0

    def handle(self, job: dict[str, Any]) -> None:
        """Validate, run and report one claimed job."""
        job_id, claim = job.get("id"), str(job.get("claim_token") or "")
        fail = api.JOB_FAIL_PATH.format(job_id=job_id)
        try:
            spec = validate_job(
                job,
                server=self.server,
                token=self.token,
                host=self.host,
                ledger_file=self.ledger_file,
            )
        except Refused as refusal:
            self.say(f"job {job_id} refused: {refusal}")
            self._post(fail, {"claim_token": claim, "reason": f"refused: {refusal}"})
            return
        self.say(f"job {job_id}: {spec.knobs} on run {spec.run_id} ({spec.rounds} rounds)")
        self.cancel.clear()
        done = threading.Event()
        ttl = job.get("claim_ttl_s")
        every = self.heartbeat_s
        if isinstance(ttl, int | float) and ttl > 0:
            every = max(1.0, min(every, ttl / 3))  # never hammer the server, whatever it says
        beat = threading.Thread(
            target=self._heartbeat, args=(job_id, claim, done, every), daemon=True
        )
        beat.start()
        try:
            plan = AbPlan(
                command=spec.command,
                knobs=spec.knobs,
                rounds=spec.rounds,
                steps=spec.steps,
                warmup=spec.warmup,
                cwd=spec.cwd,
                max_rounds=spec.max_rounds,
                time_budget_s=spec.time_budget_s,
                agreement_top1=spec.agreement_top1,
                agreement_rtol=spec.agreement_rtol,
            )
            result = run_ab(
                plan,
                on_arm=lambda arm: self._progress(job_id, claim, arm),
                cancelled=self.cancel,
                launcher=self.launcher,
            )
        except AbCancelled:
            reason = "runner stopped" if self.stopping.is_set() else "cancelled"
            self.say(f"job {job_id} {reason}; workload killed")
            if self.stopping.is_set():
                self._post(fail, {"claim_token": claim, "reason": "the runner stopped"})
            return
        except AbError as error:
            self.say(f"job {job_id} failed: {error}")
            self._post(fail, {"claim_token": claim, "reason": str(error)[:500]})
            return
        finally:
            done.set()
        # The server recomputes the result from the arms it stored; this copy is for its log.
        result_path = api.JOB_RESULT_PATH.format(job_id=job_id)
        self._post(result_path, {"claim_token": claim, "result": result.to_dict()})
        self.say(
            f"job {job_id}: speedup {result.speedup:.2f}x "
            f"(95% CI {result.ci_low:.2f}-{result.ci_high:.2f}), {result.verdict}; "
            f"{result.stop_reason}"
        )

    def _progress(self, job_id: object, claim: str, arm: Arm | None) -> None:
        body: dict[str, Any] = {"claim_token": claim}
        if arm is not None:
            body["arm"] = arm.to_dict()
        reply = self._post(api.JOB_PROGRESS_PATH.format(job_id=job_id), body)
        if reply.get("cancelled"):
            self.cancel.set()

    def _heartbeat(self, job_id: object, claim: str, done: threading.Event, every: float) -> None:
        # Keeps the claim alive while a round runs, and notices a cancel between arms.
        while not done.wait(every) and not self.cancel.is_set():
            self._progress(job_id, claim, None)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        for attempt in range(3):
            answer = self.client.post(path, body)
            if answer.status == 0:
                self.say(f"POST {path} failed ({answer.error}); retrying")
                time.sleep(1 + attempt)
                continue
            if answer.status == 409:
                return {"cancelled": True, **answer.body}
            return answer.body
        return {}

    def stop(self, signum: int, frame: FrameType | None) -> None:
        """Signal handler: stop taking jobs and kill the running workload."""
        self.stopping.set()
        self.cancel.set()


def main(server: str, token: str, *, once: bool = False, poll_s: float = 5.0) -> int:
    """`perf-agent runner`: serve jobs until SIGINT/SIGTERM."""
    runner = Runner(server, token, poll_s=poll_s)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, runner.stop)
    return runner.serve(once=once)
