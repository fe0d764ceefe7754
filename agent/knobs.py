"""Knobs: the closed list of fixes the agent can apply without editing the user's script.

The list is the knob column of FIXES.md and nothing else. It is the security boundary of
optimisation jobs: a runner accepts a job's settings only after `parse_knobs` has checked
them against this list, so the server can never ask for anything outside it.

    PERF_AGENT_KNOBS="num_workers=4,pin_memory=true,threads=2"   # applied at attach time
    PERF_AGENT_MAX_STEPS=50                                       # end cleanly after 50 steps

This module is dependency-free (the server imports it to validate jobs); the parts that touch
torch live in `agent.knobs_torch` and run only inside the user's process.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

ENV_KNOBS = "PERF_AGENT_KNOBS"
ENV_MAX_STEPS = "PERF_AGENT_MAX_STEPS"

KnobValue = int | bool | str

_TRUE = frozenset({"true", "1", "yes", "on"})
# Whole numbers are ASCII digits only: Python's int() also takes "4_0" (40) and other
# scripts' digits ("٤"), which a reviewer of a job's settings would not read as what runs.
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
_FALSE = frozenset({"false", "0", "no", "off"})


class KnobError(ValueError):
    """A knob setting that is not on the closed list or has a bad value (one line)."""


@dataclass(frozen=True)
class Knob:
    """One entry of the closed list: its name, value type and the finding it fixes."""

    name: str
    finding_id: str
    kind: str  # "int" | "bool" | "choice"
    description: str
    minimum: int = 0
    maximum: int = 0
    choices: tuple[str, ...] = ()

    def parse(self, raw: str) -> KnobValue:
        """The typed value of `raw`, or KnobError naming the knob and the bad value."""
        text = raw.strip().lower()
        if self.kind == "bool":
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise KnobError(f'knob {self.name}: "{raw}" is not true or false')
        if self.kind == "choice":
            if text in self.choices:
                return text
            allowed = " or ".join(self.choices)
            raise KnobError(f'knob {self.name}: "{raw}" is not allowed (use {allowed})')
        number = whole_number(text)
        if number is None:
            raise KnobError(f'knob {self.name}: "{raw}" is not a whole number')
        if not self.minimum <= number <= self.maximum:
            raise KnobError(f"knob {self.name}: {number} is outside {self.minimum}..{self.maximum}")
        return number


def whole_number(text: str) -> int | None:
    """`text` as an int when it is an optional sign and ASCII digits only, else None."""
    stripped = text.strip()
    if _WHOLE_NUMBER.fullmatch(stripped) is None:
        return None
    return int(stripped, 10)


def _int(name: str, finding_id: str, description: str, lo: int, hi: int) -> Knob:
    return Knob(name, finding_id, "int", description, minimum=lo, maximum=hi)


def _bool(name: str, finding_id: str, description: str) -> Knob:
    return Knob(name, finding_id, "bool", description)


def _choice(name: str, finding_id: str, description: str, *choices: str) -> Knob:
    return Knob(name, finding_id, "choice", description, choices=choices)


# The closed list (FIXES.md, knob column). Adding a knob here widens what a server may ask a
# runner to do: it needs an applier in knobs_torch and a review like any security change.
KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        _int("num_workers", "dataloader.num_workers", "DataLoader worker processes", 0, 256),
        _bool("pin_memory", "dataloader.pin_memory", "DataLoader pinned host memory"),
        _bool(
            "persistent_workers",
            "dataloader.persistent_workers",
            "keep DataLoader workers alive between epochs",
        ),
        _choice(
            "empty_cache",
            "memory.empty_cache_in_loop",
            "make torch.cuda.empty_cache() a no-op",
            "off",
        ),
        _bool(
            "expandable_segments",
            "memory.fragmentation",
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments",
        ),
        _int("threads", "cpu.thread_oversubscription", "intra-op threads", 1, 1024),
        _choice(
            "compile",
            "launch.overhead",
            'torch.compile(mode="reduce-overhead") on the model, where safe',
            "reduce-overhead",
            "default",
        ),
        _choice("amp", "precision.amp", "bf16 autocast around the model's forward", "bf16"),
        _bool("tf32", "precision.tf32", "TF32 matmul and convolution"),
        _bool("cudnn_benchmark", "cudnn.benchmark", "torch.backends.cudnn.benchmark"),
        _int("batch_size", "batch.increase", "batch size, where the DataLoader owns it", 1, 65536),
        _bool(
            "inference_mode",
            "inference.autograd_enabled",
            "torch.inference_mode() around the model's forward while it is in eval()",
        ),
        _choice(
            "quantize",
            "model.quantization",
            "int8 dynamic quantisation of the model's nn.Linear layers (eval mode only)",
            "dynamic",
        ),
        _bool(
            "channels_last",
            "inference.channels_last",
            "channels_last memory format for a conv model and its 4-D inputs",
        ),
    )
}

# Findings whose fix is a knob another finding owns (FIXES.md names one knob for both).
SHARED_KNOBS = {
    "cpu.threads_too_few": "threads",
    "dataloader.too_many_workers": "num_workers",
    "fusion.elementwise": "compile",
}
FINDING_KNOBS: dict[str, str] = {
    **{knob.finding_id: knob.name for knob in KNOBS.values()},
    **SHARED_KNOBS,
}


def parse_knob(setting: str) -> tuple[str, KnobValue]:
    """Parse one `KEY=VALUE` setting against the closed list."""
    key, sep, raw = setting.partition("=")
    key = key.strip()
    if not sep or not key:
        raise KnobError(f'knob setting "{setting}" is not KEY=VALUE')
    knob = KNOBS.get(key)
    if knob is None:
        known = ", ".join(sorted(KNOBS))
        raise KnobError(f'unknown knob "{key}" (known: {known})')
    return key, knob.parse(raw)


def parse_knobs(text: str | list[str] | tuple[str, ...]) -> dict[str, KnobValue]:
    """Parse `"k=v,k=v"` (or a list of `k=v`) into typed values; KnobError on anything off-list.

    A knob given twice is an error rather than "last wins": a job must mean one thing.
    """
    parts = text.split(",") if isinstance(text, str) else list(text)
    settings: dict[str, KnobValue] = {}
    for part in parts:
        if not part.strip():
            continue
        key, value = parse_knob(part)
        if key in settings:
            raise KnobError(f"knob {key} is given twice")
        settings[key] = value
    return settings


def validate_knobs(settings: Mapping[str, object]) -> dict[str, KnobValue]:
    """Re-check already-typed settings (e.g. a job's JSON) against the closed list."""
    if not isinstance(settings, Mapping):
        raise KnobError("knobs must be an object of KEY: VALUE")
    checked: dict[str, KnobValue] = {}
    for key, value in settings.items():
        if isinstance(value, bool):
            raw = "true" if value else "false"
        elif isinstance(value, int | str):
            raw = str(value)
        else:
            raise KnobError(f"knob {key}: value must be a number, a boolean or a string")
        name, typed = parse_knob(f"{key}={raw}")
        checked[name] = typed
    return checked


def format_value(value: KnobValue) -> str:
    """The text form of a typed knob value (`true`, `4`, `bf16`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_knobs(settings: Mapping[str, KnobValue]) -> str:
    """The canonical `PERF_AGENT_KNOBS` string: sorted, comma-separated `k=v`."""
    return ",".join(f"{key}={format_value(settings[key])}" for key in sorted(settings))


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
    try:
        from agent import aboutputs, abprobe, abseed, knobs_torch

        abseed.install_from_env()  # only inside an A/B round, as the two probes
        abprobe.install_from_env()
        aboutputs.install_from_env()  # before the knobs: it records the model they changed
        return knobs_torch.install(settings) if settings else {}
    except Exception as error:  # the agent never raises into user code
        return {"*": f"error: {type(error).__name__}: {error}"}


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
