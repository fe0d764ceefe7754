"""The knob values of a stored finding's fix: what its "Try this fix" button shows and the job
it queues applies, one value from the rule that fired (perfweb_recommender.rules.base.Fix.knobs)."""

from __future__ import annotations

from typing import Any

from perfweb.diagnostics.models import Finding
from perfweb.runs.models import Run
from perfweb_contract.knobs import (
    FINDING_KNOBS,
    KNOBS,
    KnobError,
    KnobValue,
    format_value,
    parse_knobs,
    validate_knobs,
)


def fix_knobs(fix: dict[str, Any] | None) -> dict[str, KnobValue]:
    """The typed knob settings of a stored fix (`{"num_workers": 3}`), checked against the
    catalogue again (the row is data); empty when the fix has none. A finding stored before
    fixes carried typed values has only the text (`"num_workers=3"`): it is read as such,
    and one without a concrete value (`"batch_size=N"`) has none."""
    fix = fix or {}
    try:
        if isinstance(fix.get("knobs"), dict):
            return validate_knobs(fix["knobs"])
        if isinstance(fix.get("knob"), str):
            return parse_knobs(fix["knob"])
    except KnobError:
        pass
    return {}


def finding_knobs(*, run: Run, rule_id: str) -> dict[str, KnobValue]:
    """The knob settings of the run's stored finding `rule_id`; empty when there is none."""
    finding = Finding.objects.filter(run=run, rule_id=rule_id).first()
    return fix_knobs(finding.fix if finding is not None else None)


def finding_knob_settings(*, run: Run) -> list[str]:
    """The run's findings' knob settings as text (`num_workers=3`), best-ranked first: what a
    new job on this run would most likely measure."""
    settings = []
    for fix in Finding.objects.filter(run=run).order_by("rank").values_list("fix", flat=True):
        settings += [f"{name}={format_value(value)}" for name, value in fix_knobs(fix).items()]
    return settings


def finding_knob(*, finding_id: str, run: Run | None = None) -> str | None:
    """The knob that fixes a finding: the catalogue's (FIXES.md), else the one the run's
    stored finding proposes (`fix.knob`, e.g. `compile=default` on an inference finding),
    when that knob is on the closed list. None: the finding has no knob."""
    name = FINDING_KNOBS.get(finding_id)
    if name is not None or run is None:
        return name
    fix = Finding.objects.filter(run=run, rule_id=finding_id).values_list("fix", flat=True).first()
    text = fix.get("knob") if isinstance(fix, dict) else None
    proposed = text.partition("=")[0].strip() if isinstance(text, str) else ""
    return proposed if proposed in KNOBS else None
