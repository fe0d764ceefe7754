"""The kit's expected findings are ids the recommender registers and FIXES.md lists; each
A/B knob is the one the catalogue maps to the finding it verifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.gpu.expectations import AB_PAIRS, BY_WORKLOAD, EXPECTATIONS
from perfweb_contract.knobs import KNOBS
from perfweb_recommender.rules import REGISTRY

EXPECTED_IDS = sorted({e.finding for e in EXPECTATIONS if e.finding})


@pytest.mark.parametrize("finding_id", EXPECTED_IDS)
def test_it_expects_only_registered_rule_ids(finding_id: str) -> None:
    assert finding_id in REGISTRY


def test_it_expects_only_ids_of_the_catalogue() -> None:
    repo = Path(__file__).resolve().parents[2]
    found = [p for p in (repo / "shared", repo.parent / "shared") if (p / "FIXES.md").is_file()]
    if not found:
        pytest.skip("shared/FIXES.md not available in or beside this checkout")
    text = (found[0] / "FIXES.md").read_text(encoding="utf-8")
    assert [i for i in EXPECTED_IDS if f"`{i}`" not in text] == []


@pytest.mark.parametrize("pair", AB_PAIRS, ids=lambda p: p.knob)
def test_it_ab_tests_each_knob_on_the_workload_whose_plant_it_fixes(pair) -> None:
    name = pair.knob.split("=")[0]
    assert KNOBS[name].finding_id == pair.finding
    assert BY_WORKLOAD[pair.workload].finding == pair.finding
