from __future__ import annotations

from typing import Any

import pytest

from perfweb.dashboard import panels


@pytest.fixture(autouse=True)
def no_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(panels, "_providers", [])


def test_it_collects_the_panels_that_providers_offer_for_a_run() -> None:
    def fixes(*, run: Any, user: Any) -> panels.Panel:
        return panels.Panel(template="diagnostics/_fixes.html", context={"run": run})

    def nothing(*, run: Any, user: Any) -> None:
        return None

    panels.register_run_panel(fixes)
    panels.register_run_panel(nothing)
    panels.register_run_panel(fixes)  # registering twice shows it once
    shown = panels.run_panels(run="r1", user="alice")
    assert shown == [panels.Panel(template="diagnostics/_fixes.html", context={"run": "r1"})]
