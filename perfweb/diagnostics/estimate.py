"""How long a job will take, said before it starts: the run's own step (or request) time and
start-up, times the arms, rounds and steps the job asks for. A plain estimate (the A/B engine
may add rounds while the interval is too wide, up to `max_rounds` and the job's time budget),
so the page says both the expected and the longest duration.

Here in diagnostics, below the jobs app that uses it for its form and page, because the
findings panel asks it too: a fix whose estimated gain is below the smallest effect a job of
the form's size can resolve is not offered ("Try this fix", `try_fix_refusals`)."""

from __future__ import annotations

from dataclasses import dataclass

from perfweb.runs.models import Run
from perfweb.series.selectors import series_means, series_read, series_span
from perfweb_contract.ab.decision import expected_round_sd, resolvable_effect
from perfweb_contract.ab.presentation import duration_text
from perfweb_contract.jobs import FORM_SIZES, MAX_ROUNDS, TIME_BUDGET_S
from perfweb_contract.protocol import STEP_DURATION
from perfweb_recommender.coverage import workload_kind

ARMS = 2  # baseline and candidate, each a fresh process every round


@dataclass(frozen=True)
class RunTiming:
    """What one arm of a job costs on this run's host, measured on the run itself."""

    step_s: float  # the run's mean step (request) time
    startup_s: float  # from the process's start to its first step's end, less that step
    unit: str  # "step" | "request"
    steps: tuple[float, ...] = ()  # the run's own step (request) times, up to 1000 of them


@dataclass(frozen=True)
class DurationEstimate:
    arm_s: float
    round_s: float
    expected_s: float  # the minimum rounds
    longest_s: float  # every extra round, bounded by the time budget
    rounds: int
    max_rounds: int
    timing: RunTiming
    # the smallest gain (fraction of step time) the job's rounds can tell from none at the
    # run's own step noise (perfweb_contract.ab.decision.resolvable_effect)
    resolvable_effect: float = 1.0

    def as_json(self) -> dict[str, float | int | str]:
        return {
            "arm_s": self.arm_s,
            "round_s": self.round_s,
            "expected_s": self.expected_s,
            "longest_s": self.longest_s,
            "rounds": self.rounds,
            "max_rounds": self.max_rounds,
            "step_s": self.timing.step_s,
            "startup_s": self.timing.startup_s,
            "unit": self.timing.unit,
            "resolvable_effect": self.resolvable_effect,
        }


def run_unit(run: Run) -> str:
    """What the run times: a request (inference) or a step (training, or not known)."""
    kind = workload_kind(facts=run.facts or {}, steps=run.step_count)
    return "request" if kind == "inference" else "step"


def run_timing(*, run: Run, unit: str = "step") -> RunTiming | None:
    """The run's mean step time and start-up from its stored steps; None without steps."""
    step_s = series_means(run_ids=[run.id], name=STEP_DURATION).get(run.id)
    spans = [s for s in series_span(run=run) if s["name"] == STEP_DURATION and s["count"]]
    if step_s is None or not spans:
        return None
    first_end = min(s["start"] for s in spans)
    startup_s = max(first_end - run.started_at.timestamp() - step_s, 0.0)
    read = series_read(run=run, names=[STEP_DURATION], points=1000)
    steps = tuple(float(v) for series in read for v in series.v if v > 0)
    return RunTiming(step_s=step_s, startup_s=startup_s, unit=unit, steps=steps)


def job_duration(
    *, timing: RunTiming, rounds: int, max_rounds: int, steps: int, warmup: int,
    time_budget_s: float,
) -> DurationEstimate:  # fmt: skip
    """Each arm starts the run's command afresh and runs `warmup + steps` steps; a round is
    both arms. No extra round starts past `time_budget_s`, so the longest is at most one
    round beyond it."""
    arm_s = timing.startup_s + (warmup + steps) * timing.step_s
    round_s = ARMS * arm_s
    expected_s = rounds * round_s
    longest_s = max(expected_s, min(max_rounds * round_s, time_budget_s + round_s))
    affordable = max(rounds, min(max_rounds, int((time_budget_s + round_s) // round_s)))
    kind = "inference" if timing.unit == "request" else "training"
    spread = expected_round_sd(step_s=timing.steps, steps=steps, kind=kind)
    return DurationEstimate(
        arm_s=arm_s,
        round_s=round_s,
        expected_s=expected_s,
        longest_s=longest_s,
        rounds=rounds,
        max_rounds=max_rounds,
        timing=timing,
        resolvable_effect=resolvable_effect(round_sd=spread, rounds=affordable),
    )


def estimate_sentence(estimate: DurationEstimate) -> str:
    """One sentence for the pages: expected, longest, and what the figure rests on."""
    timing = estimate.timing
    expected = duration_text(estimate.expected_s)
    longest = duration_text(estimate.longest_s)
    basis = (
        f"each arm: {duration_text(timing.startup_s)} start-up + steps of "
        f"{timing.step_s * 1e3:,.0f} ms"
        if timing.step_s >= 1e-3
        else f"each arm: {duration_text(timing.startup_s)} start-up + steps of "
        f"{timing.step_s * 1e6:,.0f} µs"
    )
    if timing.unit == "request":
        basis = basis.replace("steps of", "requests of")
    tail = (
        ""
        if estimate.longest_s <= estimate.expected_s
        else f"; up to {longest} if the interval is still too wide and it adds rounds "
        f"(at most {estimate.max_rounds})"
    )
    return (
        f"Expected to take about {expected} for {estimate.rounds} rounds of both arms, "
        f"{duration_text(estimate.round_s)} a round ({basis}, as this run measured them){tail}. "
        f"{resolvable_sentence(estimate)}"
    )


def resolvable_sentence(estimate: DurationEstimate) -> str:
    """The smallest effect the job can resolve on this host, in one sentence."""
    unit = estimate.timing.unit
    if estimate.resolvable_effect >= 1.0:
        return f"At this run's {unit} noise no effect can be resolved in the rounds it may take."
    return (
        f"The smallest effect it can resolve on this host: {estimate.resolvable_effect:.0%} of "
        f"{unit} time (the run's own {unit} noise, over up to {estimate.max_rounds} rounds)."
    )


def try_fix_refusals(*, run: Run, gains: dict[str, float | None]) -> dict[str, str]:
    """finding id -> why "Try this fix" is not offered for its estimated gain, in one
    sentence ("" where it is). A job of the form's size cannot tell a gain below the
    smallest effect it can resolve on this run's host (at the run's own step noise) from
    none: it would end inconclusive after the longest wait. Nothing is refused for a run
    that timed no step to judge by."""
    timing = run_timing(run=run, unit=run_unit(run))
    if timing is None:
        return {finding: "" for finding in gains}
    guess = job_duration(
        timing=timing,
        rounds=FORM_SIZES["rounds"],
        max_rounds=MAX_ROUNDS,
        steps=FORM_SIZES["steps"],
        warmup=FORM_SIZES["warmup"],
        time_budget_s=TIME_BUDGET_S,
    )
    floor = guess.resolvable_effect
    return {
        finding: (
            f"Not offered: the estimate ({gain:.1%}) is below the smallest effect a job can "
            f"resolve on this host ({floor:.0%} of {timing.unit} time, at this run's noise)."
            if gain is not None and gain < floor
            else ""
        )
        for finding, gain in gains.items()
    }
