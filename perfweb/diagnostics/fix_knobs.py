"""The knob values of a stored finding's fix: what its "Try this fix" button shows and the job
it queues applies, one value from the rule that fired (perfweb_recommender.rules.base.Fix.knobs)."""

from __future__ import annotations

from typing import Any

from perfweb.diagnostics.models import Finding
from perfweb.runs.models import Run
from perfweb_contract.knobs import KnobError, KnobValue, parse_knobs, validate_knobs


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
