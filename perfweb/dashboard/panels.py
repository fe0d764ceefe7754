"""Panels on the run page below the timeline, contributed by other apps.

The run page renders, in order, every panel whose provider returns one for the run. Later
apps (ranked fixes, optimisation jobs, alerts) register a provider from their AppConfig.ready()
instead of editing the dashboard's templates:

    register_run_panel(lambda *, run, user: Panel(template="diagnostics/_fixes.html",
                                                  context={"findings": ...}))
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

_providers: list[PanelProvider] = []


def register_run_panel(provider: PanelProvider) -> None:
    if provider not in _providers:
        _providers.append(provider)


def run_panels(*, run: Any, user: Any) -> list[Panel]:
    panels = (provider(run=run, user=user) for provider in _providers)
    return [panel for panel in panels if panel is not None]
