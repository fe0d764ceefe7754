"""The README says which alert rules a new project gets switched on, and it says what
DEFAULT_RULES does (it said the step-time regression rule fires while it was off)."""

from __future__ import annotations

from pathlib import Path

from perfweb.alerts.services import DEFAULT_RULES

README = Path(__file__).resolve().parents[2] / "README.md"
# How the README names each rule kind.
NAMES = {
    "low_utilization": "low GPU utilisation",
    "idle_memory_held": "a GPU holding memory while idle",
    "stalled": "stalled steps",
    "throttling": "throttling",
    "step_regression": "step-time regressions",
    "finding_gain": "new big findings",
}


def test_the_readme_lists_the_rules_on_and_off_by_default_as_they_are() -> None:
    text = " ".join(README.read_text().split())
    alerts = text[text.index("**Alerts**") :]
    on = alerts[alerts.index("On by default") : alerts.index("Off until")]
    off = alerts[alerts.index("Off until") : alerts.index("- **Prometheus**")]
    assert {kind for kind, _ in DEFAULT_RULES} == set(NAMES)
    for kind, enabled in DEFAULT_RULES:
        assert NAMES[kind] in (on if enabled else off), (kind, enabled)
        assert NAMES[kind] not in (off if enabled else on), (kind, enabled)
