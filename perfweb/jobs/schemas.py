"""The jobs' request bodies, checked whole before anything is stored: a new job's (the form's
fields or its JSON twin) and a runner's measured arm. Built on the batch's field readers
(perfweb.runs.fields): a bad field is `Invalid`, a 400 with one sentence naming it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from perfweb.runs.fields import Invalid, finite, whole
from perfweb_contract.ab.results import AGREEMENT_RTOL, AGREEMENT_TOP1_MIN
from perfweb_contract.jobs import (
    ARM_BATCH_MAX,
    ARM_BYTES_MAX,
    ARM_STEPS_MAX,
    FORM_SIZES,
    MAX_ROUNDS,
    OUTPUT_NOTE_MAX,
    OUTPUT_SAMPLES_MAX,
    SIZE_LIMITS,
)
from perfweb_contract.knobs import KnobValue, validate_knobs

# A job's output-agreement tolerance: top-1 agreement at least this share, the max relative
# difference at most this (0 demands identical outputs).
TOLERANCE_LIMITS = {"agreement_top1": (0.0, 1.0), "agreement_rtol": (0.0, 1.0)}
ARMS = ("baseline", "candidate")
ARM_KINDS = ("training", "inference", "unknown")


@dataclass(frozen=True)
class JobSizes:
    """How much a job measures and what a faster candidate must keep (the defaults: the
    form's)."""

    rounds: int = FORM_SIZES["rounds"]
    steps: int = FORM_SIZES["steps"]
    warmup: int = FORM_SIZES["warmup"]
    max_rounds: int = MAX_ROUNDS
    agreement_top1: float = AGREEMENT_TOP1_MIN
    agreement_rtol: float = AGREEMENT_RTOL


DEFAULT_SIZES = JobSizes()


def job_sizes(values: dict[str, Any]) -> JobSizes:
    """A new job's sizes and tolerances from `values` (a JSON body, or the form's fields as
    numbers); a missing one is its default."""
    given = {name: values.get(name, getattr(DEFAULT_SIZES, name)) for name in _SIZE_NAMES}
    for name, (low, high) in SIZE_LIMITS.items():
        value = given[name]
        if type(value) is not int or not low <= value <= high:
            raise Invalid(f"{name} must be in {low}..{high}")
    rounds, max_rounds = given["rounds"], given["max_rounds"]
    if type(max_rounds) is not int or not rounds <= max_rounds <= MAX_ROUNDS:
        raise Invalid(f"max_rounds must be in {rounds}..{MAX_ROUNDS}")
    for name, (least, most) in TOLERANCE_LIMITS.items():
        limit = given[name]
        if type(limit) not in (int, float) or not (math.isfinite(limit) and least <= limit <= most):
            raise Invalid(f"{name} must be a number in {least:g}..{most:g}")
        given[name] = float(limit)
    return JobSizes(**given)


_SIZE_NAMES = tuple(JobSizes.__dataclass_fields__)
TEXT_MAX = 200  # characters of the create body's finding_id and knob text


@dataclass(frozen=True)
class JobCreateBody:
    """`POST /runs/<run_id>/jobs.json`: typed `knobs` (checked against the closed list), or a
    `knob` text (`num_workers=4`), or a `finding_id` alone (its stored fix's value), and the
    sizes (`job_sizes`)."""

    finding_id: str
    knob_text: str
    knobs: dict[str, KnobValue] | None  # None: not given (the text's or the finding's)
    sizes: JobSizes


def job_create_body(body: Any) -> JobCreateBody:
    """The new-job JSON body, checked whole (KnobError for knobs off the closed list)."""
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    finding_id, knob_text = _short_text(body, "finding_id"), _short_text(body, "knob")
    knobs = validate_knobs(body["knobs"]) if "knobs" in body else None
    return JobCreateBody(finding_id, knob_text, knobs, job_sizes(body))


def _short_text(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str) or len(value) > TEXT_MAX:
        raise Invalid(f"{name} must be a string of at most {TEXT_MAX} characters")
    return value.strip()


@dataclass(frozen=True)
class ArmBody:
    """One measured arm of one round, as a runner posts it (`perfweb_agent.ab.engine.Arm`)."""

    round: int
    arm: str
    step_s: list[float]
    loss: list[float | None]  # None: not finite at that step (a diverging run)
    kind: str
    batch_sizes: list[int] | None
    peak_rss_bytes: int | None
    cuda_max_allocated_bytes: int | None
    outputs: dict[str, Any] | None


def arm_body(raw: dict[str, Any], *, max_rounds: int) -> ArmBody:
    """A runner's arm of a job of at most `max_rounds` rounds; unknown keys are dropped."""
    number = raw.get("round")
    if type(number) is not int or not 1 <= number <= max_rounds:
        raise Invalid(f"arm.round must be a whole number in 1..{max_rounds}")
    which = raw.get("arm")
    if which not in ARMS:
        raise Invalid("arm.arm must be baseline or candidate")
    step_s = _numbers(raw, "step_s")
    if len(step_s) < 3 or min(step_s) <= 0:
        raise Invalid("arm.step_s must hold at least 3 positive step times")
    loss = _losses(raw)
    kind = raw.get("kind")
    if kind is None:
        kind = "unknown"
    if kind not in ARM_KINDS:
        raise Invalid(f"arm.kind must be one of {', '.join(ARM_KINDS)}")
    batch_sizes = _batch_sizes(raw, steps=len(step_s))
    peak_rss, cuda_peak = _bytes(raw, "peak_rss_bytes"), _bytes(raw, "cuda_max_allocated_bytes")
    outputs = _outputs(raw.get("outputs"))
    if outputs is not None and which != "candidate":
        raise Invalid(
            "arm.outputs is the candidate's agreement with the baseline: "
            "only a candidate arm has it"
        )
    return ArmBody(
        round=number,
        arm=which,
        step_s=step_s,
        loss=loss,
        kind=kind,
        batch_sizes=batch_sizes,
        peak_rss_bytes=peak_rss,
        cuda_max_allocated_bytes=cuda_peak,
        outputs=outputs,
    )


def _list(raw: dict[str, Any], name: str) -> list[Any]:
    values = raw.get(name)
    if not isinstance(values, list) or len(values) > ARM_STEPS_MAX:
        raise Invalid(f"arm.{name} must be a list of at most {ARM_STEPS_MAX} numbers")
    return values


def _numbers(raw: dict[str, Any], name: str) -> list[float]:
    return [finite(value, f"arm.{name}[{i}]") for i, value in enumerate(_list(raw, name))]


def _losses(raw: dict[str, Any]) -> list[float | None]:
    """A loss per step, warm-up included; it may be missing, or not finite at a step."""
    if raw.get("loss") is None:
        return []
    return [
        None if value is None else finite(value, f"arm.loss[{i}]")
        for i, value in enumerate(_list(raw, "loss"))
    ]


def _batch_sizes(raw: dict[str, Any], *, steps: int) -> list[int] | None:
    """One batch size per kept step, or None when the agent saw none."""
    values = raw.get("batch_sizes")
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != steps:
        raise Invalid(
            f"arm.batch_sizes must be null or a list of {steps} whole numbers, one per step time"
        )
    return [whole(v, f"arm.batch_sizes[{i}]", 1, ARM_BATCH_MAX) for i, v in enumerate(values)]


def _bytes(raw: dict[str, Any], name: str) -> int | None:
    value = raw.get(name)
    return None if value is None else whole(value, f"arm.{name}", 0, ARM_BYTES_MAX)


def _outputs(raw: Any) -> dict[str, Any] | None:
    """The candidate's output-agreement summary (agent/perfweb_agent/ab/outputs.py), checked field
    by field; unknown keys are dropped: what is stored is what the server understands."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise Invalid("arm.outputs must be null or an object")
    summary: dict[str, Any] = {
        "samples": whole(raw.get("samples"), "arm.outputs.samples", 0, OUTPUT_SAMPLES_MAX),
        # requests whose output shape or finiteness differ: always outside tolerance
        "mismatched": whole(
            raw.get("mismatched", 0), "arm.outputs.mismatched", 0, OUTPUT_SAMPLES_MAX
        ),
    }
    top1 = raw.get("top1_agreement")
    if top1 is not None and not 0.0 <= finite(top1, "arm.outputs.top1_agreement") <= 1.0:
        raise Invalid("arm.outputs.top1_agreement must be null or a number in 0..1")
    summary["top1_agreement"] = None if top1 is None else float(top1)
    for name in ("max_abs_diff", "mean_abs_diff", "max_rel_diff"):
        value = raw.get(name)  # None: nothing comparable (e.g. every output mismatched)
        if value is not None and finite(value, f"arm.outputs.{name}") < 0:
            raise Invalid(f"arm.outputs.{name} must be null or a number of at least 0")
        summary[name] = None if value is None else float(value)
    note = raw.get("note", "")
    if not isinstance(note, str) or len(note) > OUTPUT_NOTE_MAX:
        raise Invalid(f"arm.outputs.note must be a string of at most {OUTPUT_NOTE_MAX} characters")
    if note:
        summary["note"] = note
    return summary
