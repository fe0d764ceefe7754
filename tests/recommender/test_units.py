"""Evidence reads in the units people use: one formatter for the CLI and the dashboard."""

from __future__ import annotations

import pytest

from perfweb.diagnostics.formatting import evidence_text
from perfweb_recommender.rules.base import Evidence
from perfweb_recommender.units import format_value


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (125_292.0, "µs", "125.3 ms"),
        (12.5, "µs", "12.5 µs"),
        (2_410.0, "ms", "2.41 s"),
        (0.0523, "s", "52.3 ms"),
        (1, "fraction", "100.0 %"),
        (0.25, "fraction", "25.0 %"),
        (8062, "requests", "8,062 requests"),
        (3 * 2**30, "bytes", "3.0 GiB"),
        (True, "flag", "yes"),
    ],
)
def test_it_writes_each_unit_as_people_read_it(value: object, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


def test_the_dashboard_and_the_cli_say_the_same_number() -> None:
    item = Evidence("mean step time", 125_292.0, "µs", "metrics (steps)")
    assert evidence_text(item.as_json()) == "mean step time: 125.3 ms (metrics (steps))"
