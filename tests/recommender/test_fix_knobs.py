"""A finding's fix carries typed knob values from the catalogue, checked when the rule fires,
and its snippet shows the same value that a job would apply."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from perfweb_contract.knobs import FINDING_KNOBS, KNOBS, KnobError, validate_knobs
from perfweb_recommender.rules import REGISTRY
from perfweb_recommender.rules.base import Evidence, Fix, checked_fix, finding
from tests.recommender.test_rules import POSITIVE, _healthy, _loader, _series, _with


@pytest.mark.parametrize("rule_id", sorted(POSITIVE))
def test_a_fired_rules_knob_values_are_typed_values_of_its_catalogue_knob(
    rule_id: str, make_summary: Callable[..., object]
) -> None:
    found = REGISTRY[rule_id].func(POSITIVE[rule_id](make_summary))
    assert found is not None
    knobs = dict(found.fix.knobs)
    assert validate_knobs(knobs) == knobs  # already typed: the check changes nothing
    for name, value in knobs.items():
        assert FINDING_KNOBS[rule_id] == name
        assert type(value) is {"int": int, "bool": bool, "choice": str}[KNOBS[name].kind]
        if KNOBS[name].kind == "int":  # the snippet shows the number the job applies
            assert str(value) in found.fix.snippet
    assert found.as_json()["fix"]["knobs"] == knobs
    assert found.as_json()["fix"]["knob"] == found.fix.knob


def test_it_refuses_a_knob_value_off_the_catalogue_when_the_rule_fires() -> None:
    with pytest.raises(KnobError, match="outside 0..256"):
        checked_fix("dataloader.num_workers", Fix("more workers", knobs={"num_workers": 999}))
    with pytest.raises(KnobError, match="not the knob of this finding"):
        checked_fix("dataloader.num_workers", Fix("threads", knobs={"threads": 2}))
    with pytest.raises(KnobError, match="unknown knob"):
        checked_fix("dataloader.num_workers", Fix("?", knobs={"command": "rm -rf /"}))
    made = finding(
        "dataloader.num_workers",
        title="t",
        confidence=0.5,
        gain=0.1,
        basis="b",
        evidence=[Evidence("x", 1, "workers", "facts")],
        fix=Fix("ok", knobs={"num_workers": 3}),
    )
    assert made.fix.knobs == {"num_workers": 3} and made.fix.knob == "num_workers=3"


def test_a_larger_batch_doubles_the_recorded_batch_size(make_summary) -> None:  # noqa: ANN001
    busy_little = [_series("gpu.utilization", [20.0] * 30), _series("torch.cuda_peak", [8e9] * 5)]
    known = _with(_healthy, series=busy_little, facts=_loader(num_workers=4, batch_size=48))
    found = REGISTRY["batch.increase"].func(known(make_summary))
    assert found is not None and found.fix.knobs == {"batch_size": 96}
    assert "batch_size=96" in found.fix.snippet and "from 48 to 96" in found.fix.text


def test_a_larger_batch_has_no_knob_when_no_batch_size_was_recorded(make_summary) -> None:  # noqa: ANN001
    busy_little = [_series("gpu.utilization", [20.0] * 30), _series("torch.cuda_peak", [8e9] * 5)]
    evidence = _with(_healthy, series=busy_little)(make_summary)
    evidence.facts.pop("dataloader.0.batch_size")
    found = REGISTRY["batch.increase"].func(evidence)
    assert found is not None and found.fix.knobs == {} and found.fix.knob is None
    assert "no value to measure" in found.fix.text
