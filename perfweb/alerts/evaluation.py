"""One evaluation tick: every enabled rule over every running run in its scope.

The conditions themselves are the recommender's (perfweb_recommender.conditions, pure functions over
a `Window`); this module reads the windows, applies the verdicts to the alerts' state
machine and stores the changes.

Each alert moves ok → firing → resolved (→ firing again). A move is a conditional UPDATE on
the alert's current state, and the event row plus one delivery per channel are written in
the same transaction; so two ticks racing store one change and send it once.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from perfweb.alerts import selectors
from perfweb.alerts.models import Alert, AlertEvent, AlertRule
from perfweb.alerts.notify import event_store
from perfweb.alerts.why import stored_regression, top_finding_for_run
from perfweb.runs.models import Run
from perfweb.series import recent as samples
from perfweb_recommender.conditions import (
    BASELINE_STEPS,
    BASELINE_WARMUP_STEPS,
    CONDITIONS,
    Series,
    Verdict,
    Window,
)

# Read for a run whose alert changes: the why (input bound?) comes from its step timings.
WHY_METRICS = ("step.duration", "step.data_wait")

Enqueue = Callable[[int, float], None]


@dataclass
class TickReport:
    rules: int = 0
    checks: int = 0
    events: list[int] = field(default_factory=list)


def alerts_evaluate(*, now: datetime | None = None, enqueue: Enqueue | None = None) -> TickReport:
    now = now or timezone.now()
    report = TickReport()
    rules = selectors.rules_enabled()
    report.rules = len(rules)
    by_project: dict[int, list[AlertRule]] = defaultdict(list)
    for rule in rules:
        by_project[rule.project_id].append(rule)
    pairs = [
        (rule, run)
        for run in selectors.runs_running(project_ids=by_project)
        for rule in by_project[run.project_id]
        if selectors.run_in_scope(run=run, scope_tag=rule.scope_tag)
    ]
    if pairs:
        report.events += _evaluate_pairs(pairs=pairs, now=now, enqueue=enqueue)
        report.checks = len(pairs)
    report.events += _resolve_ended(now=now, enqueue=enqueue)
    report.events += _remind(now=now, enqueue=enqueue)
    return report


def _evaluate_pairs(
    *, pairs: list[tuple[AlertRule, Run]], now: datetime, enqueue: Enqueue | None
) -> list[int]:
    longest = max(60 * rule.window_minutes for rule, _ in pairs)
    names = {m for rule, _ in pairs for m in CONDITIONS[rule.kind].metrics}
    end = now.timestamp()
    run_ids = {run.id for _, run in pairs}
    recent = samples.recent_samples(run_ids=run_ids, names=names, start=end - longest, end=end)
    last_steps = (
        samples.last_sample_times(run_ids=run_ids, name="step.duration")
        if any(rule.kind == "stalled" for rule, _ in pairs)
        else {}
    )
    alerts = {
        (a.rule_id, a.run_id): a
        for a in Alert.objects.filter(
            rule_id__in={rule.id for rule, _ in pairs}, run_id__in={run.id for _, run in pairs}
        )
    }
    events = []
    for rule, run in pairs:
        window = _window(
            rule=rule,
            run=run,
            series=recent.get(run.id, {}),
            end=end,
            last_step_at=last_steps.get(run.id),
        )
        verdict = CONDITIONS[rule.kind].evaluate(rule.threshold, window)
        event = alert_observe(
            rule=rule,
            run=run,
            verdict=verdict,
            window=window,
            now=now,
            enqueue=enqueue,
            alert=alerts.get((rule.id, run.id)),
        )
        if event is not None:
            events.append(event.id)
    return events


def _window(
    *,
    rule: AlertRule,
    run: Run,
    series: dict[tuple[str, str], Series],
    end: float,
    last_step_at: float | None,
) -> Window:
    window_s = 60 * rule.window_minutes
    clipped = {key: _clip(s, start=end - window_s) for key, s in series.items()}
    baseline: list[float] = []
    if rule.kind == "step_regression":
        first = samples.first_samples(
            run_id=run.id, name="step.duration", limit=BASELINE_WARMUP_STEPS + BASELINE_STEPS
        )
        baseline = first[BASELINE_WARMUP_STEPS:]
    finding = top_finding_for_run(run=run) if rule.kind == "finding_gain" else None
    regression = stored_regression(run=run) if rule.kind == "step_regression" else None
    return Window(
        now=end,
        window_s=window_s,
        series=clipped,
        steps_total=run.step_count,
        last_step_at=last_step_at,
        baseline_steps=baseline,
        finding=finding,
        regression=regression,
    )


def _clip(series: Series, *, start: float) -> Series:
    first = bisect.bisect_left(series.t, start)
    return Series(t=series.t[first:], v=series.v[first:])


def alert_observe(
    *,
    rule: AlertRule,
    run: Run,
    verdict: Verdict,
    window: Window,
    now: datetime,
    enqueue: Enqueue | None = None,
    alert: Alert | None = None,
) -> AlertEvent | None:
    """Applies one verdict to the (rule, run) alert (`alert`: the row as read with the
    others, None if there was none); returns the event if the state moved."""
    if verdict.holds is None:
        return None
    if alert is None and not verdict.holds:
        return None  # no row for the (many) runs that never fired
    if alert is None:
        alert = _alert_get_or_create(rule=rule, run=run)
    alert.rule, alert.run = rule, run  # already read: no query per message
    if verdict.holds and alert.state != Alert.FIRING:
        kind, to_state = AlertEvent.FIRING, Alert.FIRING
    elif not verdict.holds and alert.state == Alert.FIRING:
        kind, to_state = AlertEvent.RESOLVED, Alert.RESOLVED
    else:  # no change; keep a firing alert's numbers current for the page
        if alert.state == Alert.FIRING and alert.summary != verdict.summary[:500]:
            Alert.objects.filter(id=alert.id).update(summary=verdict.summary[:500])
        return None
    finding = top_finding_for_run(
        run=run, window=_with_why_series(window, run=run), verdict=verdict, kind=rule.kind
    )
    return event_store(
        alert=alert,
        kind=kind,
        to_state=to_state,
        summary=verdict.summary,
        numbers=verdict.numbers,
        finding=finding,
        now=now,
        enqueue=enqueue,
    )


def _with_why_series(window: Window, *, run: Run) -> Window:
    """The window plus the run's step timings, read only when a change needs its why."""
    start = window.now - max(window.window_s, 60.0)
    extra = samples.recent_samples(
        run_ids=[run.id], names=WHY_METRICS, start=start, end=window.now
    ).get(run.id, {})
    return replace(window, series={**window.series, **extra})


def _alert_get_or_create(*, rule: AlertRule, run: Run) -> Alert:
    try:
        with transaction.atomic():
            return Alert.objects.get_or_create(rule=rule, run=run)[0]
    except IntegrityError:  # another tick created it between our read and our insert
        return Alert.objects.get(rule=rule, run=run)


def _resolve_ended(*, now: datetime, enqueue: Enqueue | None) -> list[int]:
    events = []
    for alert in selectors.alerts_open_on_ended_runs():
        why = f"run {alert.run.status}" if alert.run.status != Run.RUNNING else "rule switched off"
        event = event_store(
            alert=alert,
            kind=AlertEvent.RESOLVED,
            to_state=Alert.RESOLVED,
            summary=why,
            numbers={},
            finding=None,
            now=now,
            enqueue=enqueue,
        )
        if event is not None:
            events.append(event.id)
    return events


def _remind(*, now: datetime, enqueue: Enqueue | None) -> list[int]:
    events = []
    for alert in selectors.alerts_due_reminder(now=now):
        event = event_store(
            alert=alert,
            kind=AlertEvent.REMINDER,
            to_state=Alert.FIRING,
            summary=alert.summary,
            numbers={},
            finding=None,
            now=now,
            enqueue=enqueue,
        )
        if event is not None:
            events.append(event.id)
    return events
