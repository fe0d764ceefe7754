"""The knob catalogue: the closed list of fixes an optimisation job can apply, and its parser.

The list is the knob column of FIXES.md and nothing else: each knob's name, value type,
bounds or choices, and the finding it fixes. It is the security boundary of optimisation
jobs: a runner accepts a job's settings only after `validate_knobs` has checked them against
this list, so the server can never ask for anything outside it; the recommender checks the
value of a finding's fix against it when the rule fires, and the server checks a job's
settings against it before queueing.

Standard library only (contract/perfweb_contract/__init__.py); the code that applies a knob inside
the user's process is agent/perfweb_agent/ab/knobs.py and agent/perfweb_agent/ab/knobs_torch.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

KnobValue = int | bool | str
# The run's fact naming the knobs the agent applied in it (canonical `k=v,k=v`), so that a
# page showing the run (a comparison with the run before the fix) says it was changed.
FACT_KNOBS = "ab.knobs"

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
    # Where the knob can do anything: the workloads whose code it changes, and whether it
    # needs CUDA (on a CPU run it would be measured as a no-op). Pages offer only these.
    workloads: tuple[str, ...] = ("training", "inference")
    cuda_only: bool = False

    def example(self) -> str:
        """A setting of this knob as a person would type it: `num_workers=4`, `amp=bf16`."""
        if self.kind == "bool":
            return f"{self.name}=true"
        if self.kind == "choice":
            return f"{self.name}={self.choices[-1]}"
        return f"{self.name}={max(self.minimum, min(4, self.maximum))}"

    def values_text(self) -> str:
        """What the knob takes: `true|false`, `reduce-overhead|default`, `0..256`."""
        if self.kind == "bool":
            return "true|false"
        if self.kind == "choice":
            return "|".join(self.choices)
        return f"{self.minimum}..{self.maximum}"

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

_INFERENCE_ONLY = ("inference_mode", "quantize", "channels_last")
_CUDA_ONLY = ("pin_memory", "empty_cache", "expandable_segments", "amp", "tf32", "cudnn_benchmark")
KNOBS = {
    name: replace(
        knob,
        workloads=("inference",) if name in _INFERENCE_ONLY else knob.workloads,
        cuda_only=name in _CUDA_ONLY,
    )
    for name, knob in KNOBS.items()
}


def knobs_for(*, kind: str | None, cuda: bool) -> list[Knob]:
    """The knobs that can change something in a run of this kind (`training`, `inference`,
    None when unknown: every workload's) on a host with or without CUDA."""
    return [
        knob
        for knob in KNOBS.values()
        if (kind is None or kind in knob.workloads) and (cuda or not knob.cuda_only)
    ]


# Findings whose fix is a knob another finding owns (FIXES.md names one knob for both).
SHARED_KNOBS = {
    "cpu.threads_too_few": "threads",
    "dataloader.too_many_workers": "num_workers",
    "dataloader.io_wait": "num_workers",
    "fusion.elementwise": "compile",
    # eager inference: the compile knob measures torch.compile, the one runtime change a job
    # can apply (with output agreement); TensorRT / ONNX Runtime stay the fix's text
    "inference.compile_runtime": "compile",
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
