"""The run page's "Optimisation jobs" panel (registered with the dashboard in apps.ready)."""

from __future__ import annotations

from typing import Any

from perfweb.jobs.selectors import job_list_for_run
from perfweb.pages.panels import Panel


def jobs_panel(*, run: Any, user: Any) -> Panel | None:
    """The run's latest jobs and a link to measure any knob; none for a run without a
    recorded command (nothing a runner could run)."""
    if not run.command or not run.host:
        return None
    jobs = job_list_for_run(run=run, limit=5)
    return Panel(template="jobs/_jobs_panel.html", context={"run_id": run.run_id, "jobs": jobs})
