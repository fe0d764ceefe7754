"""Panels on the run page below the timeline, contributed by other apps.

The run page renders, in order, every panel whose provider returns one for the run. Later
apps (ranked fixes, optimisation jobs, alerts) register a provider from their AppConfig.ready()
instead of editing the dashboard's templates:

    register_run_panel(lambda *, run, user: Panel(template="diagnostics/_findings.html",
                                                  context={"findings": ...}), order=10)

Panels appear by `order` (lower first; ties keep registration order), so what a reader needs
first — the ranked fixes — does not depend on the order of INSTALLED_APPS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Panel:
    template: str
    context: dict[str, Any] = field(default_factory=dict)


PanelProvider = Callable[..., "Panel | None"]

_providers: list[tuple[int, PanelProvider]] = []


def register_run_panel(provider: PanelProvider, *, order: int = 100) -> None:
    if all(registered is not provider for _, registered in _providers):
        _providers.append((order, provider))
        _providers.sort(key=lambda entry: entry[0])  # stable: ties keep registration order


def run_panels(*, run: Any, user: Any) -> list[Panel]:
    panels = (provider(run=run, user=user) for _, provider in _providers)
    return [panel for panel in panels if panel is not None]
