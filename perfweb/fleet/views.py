"""Fleet views: `/metrics` for Prometheus, the waste page, and a project's GPU prices (the
page's read-API twin, `GET /api/v1/waste`, is perfweb/api/fleet.py). Thin: parse, call one
function, answer."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from perfweb.fleet import conf, services
from perfweb.fleet.exporter import exposition
from perfweb.fleet.models import GpuPrice
from perfweb.fleet.selectors import WINDOWS, BadQuery, waste_query, waste_report
from perfweb.fleet.snapshot import fleet_snapshot
from perfweb.http.auth import bearer_project
from perfweb.http.bodies import error_response
from perfweb.projects.selectors import project_list_for_user
from perfweb.runs.selectors import run_queryset


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    project = bearer_project(request)
    if project is None:
        return error_response("send a project token: Authorization: Bearer <token>", 401)
    body = exposition(fleet_snapshot(project=project))
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


@require_GET
@login_required
def waste_page(request: HttpRequest) -> HttpResponse:
    try:
        runs, window, tag = waste_query(request.GET, run_queryset(user=request.user))
    except BadQuery as error:
        raise Http404(str(error)) from None
    report = waste_report(runs=runs, window=window, now=timezone.now(), tag=tag)
    projects = project_list_for_user(user=request.user).order_by("name")
    return render(
        request,
        "fleet/waste.html",
        {
            "report": report,
            "window": window,
            "windows": list(WINDOWS),
            "tag": tag,
            "project": request.GET.get("project", ""),
            "projects": projects,
            "prices": GpuPrice.objects.filter(project__in=projects).order_by(
                "project__name", "model"
            ),
            "default_prices": conf.default_prices(),
        },
    )


@require_POST
@login_required
def price_save(request: HttpRequest) -> HttpResponse:
    projects = project_list_for_user(user=request.user)
    project = projects.filter(name=request.POST.get("project", "")).first()
    if project is None:
        raise Http404("No such project of yours.")
    if request.POST.get("delete"):
        services.gpu_price_delete(project=project, model=request.POST.get("model", ""))
    else:
        try:
            services.gpu_price_set(
                project=project,
                model=request.POST.get("model", ""),
                price=request.POST.get("price", ""),
            )
        except ValueError as error:
            return HttpResponse(str(error), status=400, content_type="text/plain")
    return redirect("fleet:waste")
