"""Knobs inside the user's process: the settings an optimisation job hands the agent.

    PERF_AGENT_KNOBS="num_workers=4,pin_memory=true,threads=2"   # applied at attach time
    PERF_AGENT_MAX_STEPS=50                                       # end cleanly after 50 steps

What a knob is (the closed list, its types and bounds, the parser) is the contract's
(`perfweb_contract.knobs`); this module reads the two variables, checks them against that list and
applies them. The parts that touch torch live in `perfweb_agent.ab.knobs_torch` and run only inside
the user's process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from perfweb_contract.knobs import (
    FACT_KNOBS,
    KnobError,
    KnobValue,
    format_knobs,
    parse_knobs,
    whole_number,
)
from perfweb_contract.loaders import FACT_KNOB_LOADER, LOADER_KNOBS

ENV_KNOBS = "PERF_AGENT_KNOBS"
ENV_MAX_STEPS = "PERF_AGENT_MAX_STEPS"
# what an A/B round's arm is given besides its knobs (ab/seed.py, ab/loss_probe.py,
# ab/outputs.py): a process without any of these and without knobs imports none of them
AB_ROUND_ENV_PREFIX = "PERF_AGENT_AB_"


def knobs_from_env(environ: Mapping[str, str] | None = None) -> dict[str, KnobValue]:
    """The settings in `PERF_AGENT_KNOBS` (empty when unset); KnobError when off-list."""
    env = os.environ if environ is None else environ
    return parse_knobs(env.get(ENV_KNOBS, ""))


def max_steps_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """`PERF_AGENT_MAX_STEPS` as a positive int, None when unset; KnobError when malformed."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_MAX_STEPS, "").strip()
    if not raw:
        return None
    number = whole_number(raw)
    if number is None or number < 1:
        raise KnobError(f'{ENV_MAX_STEPS}="{raw}" is not a positive whole number')
    return number


def check_env(environ: Mapping[str, str] | None = None) -> None:
    """Validate both variables; the launcher calls this before starting the script."""
    knobs_from_env(environ)
    max_steps_from_env(environ)


def apply_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Apply `PERF_AGENT_KNOBS` inside this process (the agent's bootstrap calls it once).

    Environment-level knobs take effect now (before torch is imported); torch-level ones the
    moment the script imports torch. Never raises: a bad setting is reported in the returned
    status (the launcher already refused it before the script started).
    Returns knob name -> status ("pending", "applied", "skipped: <why>", "error: <why>").
    """
    try:
        settings = knobs_from_env(environ)
    except KnobError as error:
        return {"*": f"error: {error}"}
    environ = os.environ if environ is None else environ
    if not settings and not any(name.startswith(AB_ROUND_ENV_PREFIX) for name in environ):
        return {}  # not a job's round: nothing of the A/B machinery is imported
    try:
        from perfweb_agent.ab import knobs_torch
        from perfweb_agent.ab import loss_probe as abprobe
        from perfweb_agent.ab import outputs as aboutputs
        from perfweb_agent.ab import seed as abseed

        abseed.install_from_env()  # only inside an A/B round, as the two probes
        abprobe.install_from_env()
        aboutputs.install_from_env()  # before the knobs: it records the model they changed
        return knobs_torch.install(settings) if settings else {}
    except Exception as error:  # the agent never raises into user code
        return {"*": f"error: {type(error).__name__}: {error}"}


def record_applied(agent: object, environ: Mapping[str, str] | None = None) -> None:
    """Record `PERF_AGENT_KNOBS` as the run's fact `ab.knobs`, so that every page that shows
    the run (a comparison with the run before the fix) says the agent changed it. Nothing
    when unset; never raises."""
    with contextlib.suppress(Exception):
        settings = knobs_from_env(environ)
        facts = getattr(agent, "facts", None)
        if settings and facts is not None:
            from perfweb_agent.ab import knobs_torch

            facts.set(FACT_KNOBS, format_knobs(settings))
            loader = knobs_torch.knob_loader(environ)
            if loader is not None and any(name in settings for name in LOADER_KNOBS):
                facts.set(FACT_KNOB_LOADER, loader)  # the one DataLoader they changed


class StepLimit:
    """Ends the workload cleanly after `PERF_AGENT_MAX_STEPS` steps.

    The agent's step hook calls `on_step()` after each step. At the limit it runs the flush
    callback and raises SystemExit(0): the user's `finally` blocks and atexit handlers run,
    DataLoader workers are shut down, and the exit code is 0.
    """

    def __init__(self, max_steps: int | None, flush: object = None) -> None:
        self.max_steps = max_steps
        self.steps = 0
        self._flush = flush

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, flush: object = None) -> StepLimit:
        """A limit from `PERF_AGENT_MAX_STEPS`; an invalid value means no limit."""
        try:
            return cls(max_steps_from_env(environ), flush)
        except KnobError:
            return cls(None, flush)

    def on_step(self, *_step_index: object) -> None:
        """Count one finished step; exit(0) after flushing when the limit is reached."""
        self.steps += 1
        if self.max_steps is None or self.steps < self.max_steps:
            return
        if callable(self._flush):
            with contextlib.suppress(Exception):
                self._flush()
        raise SystemExit(0)


def register_step_limit(agent: object) -> StepLimit | None:
    """Hook `PERF_AGENT_MAX_STEPS` onto a started agent's step timer (None when unset)."""
    limit = StepLimit.from_env()
    timer = getattr(agent, "timer", None)
    if limit.max_steps is None or timer is None:
        return None
    timer.listeners.append(limit.on_step)
    return limit
