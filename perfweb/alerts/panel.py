"""The run page's alerts panel: what is firing on this run and why, with a link to the rules."""

from __future__ import annotations

from typing import Any

from perfweb.alerts.models import Alert
from perfweb.pages.panels import Panel


def alerts_panel(*, run: Any, user: Any) -> Panel:
    """The run's alerts that ever fired, firing first (the run page is already scoped)."""
    alerts = (
        Alert.objects.filter(run=run)
        .exclude(state=Alert.OK)
        .select_related("rule")
        .order_by("state", "-changed_at")[:10]
    )
    return Panel(
        template="alerts/_run_panel.html",
        context={"alerts": list(alerts), "project_id": run.project_id},
    )
