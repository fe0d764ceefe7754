"""Dashboard pages. Thin: each one asks a selector for the user's data and renders it.

The pages render the run's numbers on the server (so they read well without JavaScript and
in tests) and then keep them current from the read API (docs/protocol.md) in the browser.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from perfweb.dashboard import assets, comparison_page, presenters
from perfweb.dashboard.timeline_rows import timeline_extras_config, timeline_rows_config
from perfweb.diagnostics.anatomy import run_anatomy, run_utilisation
from perfweb.diagnostics.workload import run_rows_with_coverage
from perfweb.pages.panels import run_panels
from perfweb.projects.selectors import project_list_for_user
from perfweb.runs.selectors import run_get_for_user, run_queryset
from perfweb.series.run_rows import run_detail as run_detail_row
from perfweb.series.run_rows import run_list_for_user
from perfweb_contract.api import RUN_PATH, RUNS_PATH
from perfweb_contract.protocol import RUN_STATUSES
from perfweb_recommender.coverage import workload_kind

RUNS_ON_PAGE = 100
POPUP_OPENER_POLICY = "same-origin-allow-popups"


@require_GET
@login_required
def runs_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status")
    status = status if status in RUN_STATUSES else None
    runs = run_rows_with_coverage(
        rows=run_list_for_user(user=request.user, status=status, limit=RUNS_ON_PAGE),
        runs=run_queryset(user=request.user),
    )
    show_project = project_list_for_user(user=request.user).count() > 1
    return render(
        request,
        "dashboard/runs.html",
        {
            "runs": [presenters.with_command_line(run) for run in runs],
            "show_project": show_project,
            "status": status,
            "statuses": RUN_STATUSES,
            "server_url": request.build_absolute_uri("/").rstrip("/"),
            "page_config": {
                "api": RUNS_PATH,
                "runUrl": reverse("dashboard:run", args=["RUN_ID"]),
                "limit": RUNS_ON_PAGE,
                "showProject": show_project,
                "status": status,
            },
        },
    )


@require_GET
@login_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("No such run in your projects.")
    row = presenters.with_command_line(run_detail_row(run=run))
    kind = workload_kind(facts=run.facts or {}, steps=run.step_count)
    anatomy = run_anatomy(run=run)
    compute = run_utilisation(run=run)
    response = render(
        request,
        "dashboard/run_detail.html",
        {
            "run": row,
            "kind": kind,
            "anatomy": presenters.anatomy_view(anatomy) if anatomy is not None else None,
            "compute": presenters.compute_view(compute),
            "panels": run_panels(run=run, user=request.user),
            "page_config": {
                "api": RUN_PATH.format(run_id=run.run_id),
                "runId": run.run_id,
                "status": row["status"],
                "gpus": row["gpus"],
                "kind": kind,
                "rows": timeline_rows_config(kind=kind),
                "extras": timeline_extras_config(),
            },
        },
    )
    # "Open in Perfetto" opens ui.perfetto.dev and posts the trace to it: under Django's
    # default COOP (same-origin) that popup would be severed from this page.
    response["Cross-Origin-Opener-Policy"] = POPUP_OPENER_POLICY
    return response


@require_GET
@login_required
def compare(request: HttpRequest) -> HttpResponse:
    """Two or more runs side by side (`?run=...&run=...`): each against the earliest one."""
    ids = list(dict.fromkeys(request.GET.getlist("run")))
    if not 2 <= len(ids) <= comparison_page.MAX_RUNS:
        return render(
            request,
            "dashboard/compare.html",
            {"error": f"Pick between 2 and {comparison_page.MAX_RUNS} runs to compare."},
            status=400,
        )
    runs = [run_get_for_user(user=request.user, run_id=run_id) for run_id in ids]
    if any(run is None for run in runs):
        raise Http404("No such run in your projects.")
    found = sorted((r for r in runs if r is not None), key=lambda r: (r.started_at, r.run_id))
    context = comparison_page.compare_context(runs=found)  # A: the earliest, the baseline
    return render(request, "dashboard/compare.html", context)


@require_GET
def plotly_js(request: HttpRequest, version: str) -> HttpResponse:
    """Plotly.js from the installed plotly package; public (the login page needs no chart,
    but a cached copy must not depend on a session) and cacheable for a year."""
    if version != assets.plotly_version():
        raise Http404("Unknown plotly version.")
    asset = assets.plotly_js()
    if request.headers.get("If-None-Match") == asset.etag:
        return HttpResponseNotModified(headers={"ETag": asset.etag})
    gzip_ok = "gzip" in request.headers.get("Accept-Encoding", "")
    response = HttpResponse(
        asset.gzipped if gzip_ok else asset.body, content_type="text/javascript; charset=utf-8"
    )
    if gzip_ok:
        response["Content-Encoding"] = "gzip"
    response["Vary"] = "Accept-Encoding"
    response["ETag"] = asset.etag
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response
