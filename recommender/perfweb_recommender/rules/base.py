"""Findings, the rule registry and the ranking.

A rule is a pure function `RunEvidence -> Finding | None`, registered under one id of
FIXES.md. Its docstring has three paragraphs, What / Why / Fix, shown verbatim in the UI.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from perfweb_contract.knobs import FINDING_KNOBS, KnobError, KnobValue, format_knobs, validate_knobs
from perfweb_recommender.evidence import RunEvidence

RISK_CLASSES = ("data-path", "operator", "distributed", "model", "system")
# Discount per risk class: the cheapest safe changes first (FIXES.md). A model-class finding
# can never outrank an equally large data-path one.
RISK_WEIGHT = {
    "data-path": 1.0,
    "operator": 0.8,
    "distributed": 0.7,
    "model": 0.5,
    "system": 0.3,
}
# Findings of this risk class describe the host, not the script (contention, throttling, an
# idle GPU holding memory): they explain inflated figures and are shown apart from the
# workload's ranked fixes, never ahead of them (FIXES.md).
HOST_CONDITION_RISK = "system"


# Count units in the plural, and their singular for a count of exactly one ("1 process").
SINGULAR_UNITS = {
    "processes": "process",
    "threads": "thread",
    "cores": "core",
    "workers": "worker",
    "calls": "call",
    "steps": "step",
    "ranks": "rank",
    "parameters": "parameter",
    "regions": "region",
    "copies": "copy",
    "ops": "op",
    "samples": "sample",
    "stalls": "stall",
    "hosts": "host",
    "epochs": "epoch",
}


def counted(count: float, singular: str, plural: str | None = None) -> str:
    """ "1 core", "8 cores" (plural defaults to singular + "s")."""
    return f"{count:g} {singular if count == 1 else plural or singular + 's'}"


def times(count: float) -> str:
    """ "1 time", "2 times", "0.5 times" (a count of calls, for titles)."""
    return f"{count:g} time" if count == 1 else f"{count:g} times"


@dataclass(frozen=True)
class Evidence:
    """One measured number behind a finding."""

    label: str
    value: float | int | str | bool
    unit: str
    source: str  # "trace", "metrics", "facts" (with detail, e.g. "trace rank 0")

    @property
    def display_unit(self) -> str:
        """The unit as read after the value: singular for a count of exactly one."""
        if self.value == 1 and not isinstance(self.value, bool):
            return SINGULAR_UNITS.get(self.unit, self.unit)
        return self.unit

    def as_json(self) -> dict[str, Any]:
        """JSON form."""
        value = round(self.value, 4) if isinstance(self.value, float) else self.value
        return {
            "label": self.label,
            "value": value,
            "unit": self.display_unit,
            "source": self.source,
        }


@dataclass(frozen=True)
class Fix:
    """What to do: text, a short code snippet, and the typed knob settings an optimisation
    job can apply (`{"num_workers": 3}`; perfweb_contract.knobs), checked against the catalogue when
    the rule fires (`finding`). The snippet shows the same value the job applies."""

    text: str
    snippet: str = ""
    knobs: Mapping[str, KnobValue] = field(default_factory=dict)

    @property
    def knob(self) -> str | None:
        """The knob settings as text (`num_workers=3`), None when the fix has none."""
        return format_knobs(self.knobs) or None

    def as_json(self) -> dict[str, Any]:
        """JSON form: `knobs` typed, `knob` its text."""
        return {
            "text": self.text,
            "snippet": self.snippet,
            "knob": self.knob,
            "knobs": dict(self.knobs),
        }


@dataclass
class Finding:
    """One diagnosis: id, title, evidence, estimated gain, confidence, risk and the fix."""

    id: str
    title: str
    risk: str
    confidence: float  # 0..1
    estimated_gain: float  # fraction of step time recoverable, 0..1
    gain_basis: str  # how the gain was estimated
    evidence: list[Evidence]
    fix: Fix
    doc: str = ""
    measured_gain: float | None = None  # set when an optimisation job verified the fix
    critical: bool = False  # the run ends, hangs or silently trains wrong: ranks first

    @property
    def prior(self) -> bool:
        """Whether the gain is a fixed prior, not computed from this run's measurements."""
        return self.gain_basis.startswith("prior")

    @property
    def score(self) -> float:
        """Ranking key: expected time recovered x confidence x risk discount; or measured gain."""
        if self.measured_gain is not None:
            return max(0.0, self.measured_gain)
        return self.estimated_gain * self.confidence * RISK_WEIGHT[self.risk]

    def as_json(self) -> dict[str, Any]:
        """JSON form (the CLI's `findings[]`)."""
        return {
            "id": self.id,
            "title": self.title,
            "risk": self.risk,
            "confidence": round(self.confidence, 2),
            "estimated_gain": round(self.estimated_gain, 4),
            "gain_basis": self.gain_basis,
            "measured_gain": self.measured_gain,
            "score": round(self.score, 4),
            "critical": self.critical,
            "prior": self.prior,
            "evidence": [e.as_json() for e in self.evidence],
            "fix": self.fix.as_json(),
            "doc": self.doc,
        }


Rule = Callable[[RunEvidence], "Finding | None"]


@dataclass
class RegisteredRule:
    """A rule with its id, risk class and documentation."""

    id: str
    risk: str
    func: Rule
    doc: str = field(default="")

    @property
    def fix_text(self) -> str:
        """The doc's Fix paragraph in one line, without its "Fix:" label: the catalogue's fix
        in words (what an alert message quotes when no finding of the run says more)."""
        for paragraph in self.doc.split("\n\n"):
            if paragraph.startswith("Fix:"):
                return " ".join(paragraph.removeprefix("Fix:").split())
        return ""


REGISTRY: dict[str, RegisteredRule] = {}


def rule(rule_id: str, *, risk: str) -> Callable[[Rule], Rule]:
    """Register a rule function under a FIXES.md id."""
    if risk not in RISK_CLASSES:
        raise ValueError(f"unknown risk class {risk!r}")

    def register(func: Rule) -> Rule:
        if rule_id in REGISTRY:
            raise ValueError(f"rule {rule_id!r} registered twice")
        REGISTRY[rule_id] = RegisteredRule(
            id=rule_id, risk=risk, func=func, doc=inspect.cleandoc(func.__doc__ or "")
        )
        return func

    return register


def finding(
    rule_id: str,
    *,
    title: str,
    confidence: float,
    gain: float,
    basis: str,
    evidence: list[Evidence],
    fix: Fix,
    critical: bool = False,
) -> Finding:
    """Build a Finding for a registered rule (risk class and doc come from the registry).

    A `basis` that starts with "prior" marks the gain as a fixed prior (no measurement);
    `critical` marks a finding that ends, hangs or corrupts the run (gain 0, ranked first).
    """
    registered = REGISTRY[rule_id]
    fix = checked_fix(rule_id, fix)
    return Finding(
        id=rule_id,
        title=title,
        risk=registered.risk,
        confidence=max(0.0, min(1.0, confidence)),
        estimated_gain=max(0.0, min(1.0, gain)),
        gain_basis=basis,
        evidence=evidence,
        fix=fix,
        doc=registered.doc,
        critical=critical,
    )


def checked_fix(rule_id: str, fix: Fix) -> Fix:
    """`fix` with its knob values checked against the catalogue (perfweb_contract.knobs) and typed;
    KnobError when a value is off the closed list or out of bounds, or the knob is not the
    one FIXES.md names for `rule_id` (a faulty rule, which `diagnose` logs and skips)."""
    if not fix.knobs:
        return fix
    knobs = validate_knobs(fix.knobs)
    for name in knobs:
        if FINDING_KNOBS.get(rule_id) != name:
            raise KnobError(f"rule {rule_id}: knob {name} is not the knob of this finding")
    return replace(fix, knobs=knobs)


def is_host_condition(found: Finding) -> bool:
    """Whether `found` is a host condition (risk `system`), not a fix of the workload."""
    return found.risk == HOST_CONDITION_RISK


def rank_tier(found: Finding) -> int:
    """0: critical (the run ends or hangs); 1: a gain measured on this run (or verified by a
    job); 2: a prior gain, which never outranks a measured one; 3: no gain to claim."""
    if found.critical:
        return 0
    if found.score <= 0:
        return 3
    return 2 if found.prior and found.measured_gain is None else 1


# Findings that sum up rather than name a cause (low MFU points at the step's largest phase):
# every finding that names one ranks first, even one with no gain to claim on this hardware.
UMBRELLA_IDS = frozenset({"compute.low_mfu"})


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Best first: the workload's fixes, then the host conditions; each by tier (critical,
    measured, prior, none), then score, then risk class order, then id (stable,
    deterministic). A host condition never ranks ahead of a fix of the workload, nor an
    umbrella finding ahead of one that names a cause."""
    return sorted(
        findings,
        key=lambda f: (
            is_host_condition(f),
            f.id in UMBRELLA_IDS,
            rank_tier(f),
            -f.score,
            RISK_CLASSES.index(f.risk),
            f.id,
        ),
    )


def split_findings(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """`findings` (ranked) as (the workload's fixes, the host conditions), each in order: the
    one split the CLI, the JSON, the server's API and the run page all show."""
    return (
        [f for f in findings if not is_host_condition(f)],
        [f for f in findings if is_host_condition(f)],
    )
