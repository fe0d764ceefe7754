from __future__ import annotations

from typing import Any

import pytest

from perfweb.pages import panels


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


def test_it_orders_panels_by_their_order_not_by_registration() -> None:
    def provider(name: str):  # noqa: ANN202
        return lambda *, run, user: panels.Panel(template=f"{name}.html")

    panels.register_run_panel(provider("jobs"), order=20)
    panels.register_run_panel(provider("alerts"), order=30)
    panels.register_run_panel(provider("fixes"), order=10)
    panels.register_run_panel(provider("extra"))  # default order: after the built-in ones
    shown = [panel.template for panel in panels.run_panels(run="r1", user="alice")]
    assert shown == ["fixes.html", "jobs.html", "alerts.html", "extra.html"]
