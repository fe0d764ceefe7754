"""The jobs pages: thin adapters over selectors (reads) and services (writes).

Every page is scoped to the user's projects: another project's job or run is a 404.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from perfweb.dashboard import assets
from perfweb.diagnostics.fix_knobs import finding_knob_settings, finding_knobs
from perfweb.errors import ClientError
from perfweb.http.bodies import json_response, read_json
from perfweb.jobs import selectors, services
from perfweb.jobs.schemas import DEFAULT_SIZES, job_create_body, job_sizes
from perfweb.runs.models import Run
from perfweb.runs.selectors import run_get_for_user
from perfweb_contract.ab.results import AGREEMENT_RTOL, AGREEMENT_TOP1_MIN
from perfweb_contract.jobs import MAX_ROUNDS, SIZE_LIMITS, TIME_BUDGET_S
from perfweb_contract.knobs import KnobError, KnobValue, knobs_for, parse_knobs, whole_number
from perfweb_recommender.coverage import workload_kind


@require_http_methods(["GET", "POST"])
@login_required
def run_jobs(request: HttpRequest, run_id: str) -> HttpResponse:
    """GET: the run's jobs and a form; POST: "Try this fix" (finding + the knob it shows, or
    the finding alone: its stored value) or any knob."""
    run = run_get_for_user(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("No such run in your projects.")
    if request.method == "POST":
        finding_id = request.POST.get("finding_id", "").strip()
        knob_text = request.POST.get("knob", "").strip()
        try:
            knobs = _knobs(run=run, finding_id=finding_id, knob_text=knob_text)
            sizes = job_sizes(_form_sizes(request))
            job = services.job_create(
                user=request.user, run=run, knobs=knobs, finding_id=finding_id, sizes=sizes
            )
        except (ClientError, KnobError) as error:
            messages.error(request, str(error))
            return redirect(reverse("jobs:run_jobs", args=[run.run_id]))
        return redirect(reverse("jobs:job", args=[job.id]))
    kind = workload_kind(facts=run.facts or {}, steps=run.step_count)
    cuda = run.devices.filter(kind="gpu").exists() or bool((run.facts or {}).get("cuda.available"))
    offered = knobs_for(kind=kind, cuda=cuda)
    names = {knob.name for knob in offered}
    own = [s for s in finding_knob_settings(run=run) if s.split("=")[0] in names]
    return render(
        request,
        "jobs/run_jobs.html",
        {
            "run": run,
            "jobs": selectors.job_list_for_run(run=run),
            "knobs": offered,
            "kind": kind,
            "cuda": cuda,
            "placeholder": own[0] if own else (offered[0].example() if offered else ""),
            "estimate": selectors.run_duration_estimate(
                run=run,
                rounds=DEFAULT_SIZES.rounds,
                max_rounds=MAX_ROUNDS,
                steps=DEFAULT_SIZES.steps,
                warmup=DEFAULT_SIZES.warmup,
                time_budget_s=TIME_BUDGET_S,
            ),
            "agreement_top1": AGREEMENT_TOP1_MIN,
            "agreement_rtol": AGREEMENT_RTOL,
            "limits": {name: {"least": lo, "most": hi} for name, (lo, hi) in SIZE_LIMITS.items()},
        },
    )


def _knobs(*, run: Run, finding_id: str, knob_text: str) -> dict[str, KnobValue]:
    """The settings to measure: the knob text's, or the finding's stored fix's when only the
    finding is given (each checked against the closed list as it is read)."""
    if finding_id and not knob_text:
        knobs = finding_knobs(run=run, rule_id=finding_id)
        if not knobs:
            raise services.JobError(f"this run's finding {finding_id} has no knob value")
        return knobs
    return parse_knobs(knob_text)


@require_POST
def run_jobs_json(request: HttpRequest, run_id: str) -> HttpResponse:
    """`POST /runs/<run_id>/jobs.json`: start a job from a JSON body (`schemas.JobCreateBody`);
    201 with the job's state, or 400 with one sentence. A logged-in member's session (and its
    CSRF token), as for the form."""
    if not request.user.is_authenticated:
        return json_response({"error": "log in to start jobs"}, status=401)
    run = run_get_for_user(user=request.user, run_id=run_id)
    if run is None:
        return json_response({"error": "no such run in your projects"}, status=404)
    try:
        body = job_create_body(read_json(request))
        knobs = body.knobs
        if knobs is None:
            knobs = _knobs(run=run, finding_id=body.finding_id, knob_text=body.knob_text)
        job = services.job_create(
            user=request.user,
            run=run,
            knobs=knobs,
            finding_id=body.finding_id,
            sizes=body.sizes,
        )
    except ClientError as error:
        return json_response({"error": error.sentence()}, status=error.status)
    except KnobError as error:
        return json_response({"error": str(error)}, status=400)
    return json_response(selectors.job_state(job=job), status=201)


def _form_sizes(request: HttpRequest) -> dict[str, Any]:
    """The sizes the form was given, as numbers (the rest take their defaults)."""
    sizes: dict[str, Any] = {}
    for name in ("rounds", "steps", "max_rounds"):
        if (number := _size(request, name)) is not None:
            sizes[name] = number
    for name in ("agreement_top1", "agreement_rtol"):
        if (limit := _tolerance(request, name)) is not None:
            sizes[name] = limit
    return sizes


@require_GET
@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    if job is None:
        raise Http404("No such job in your projects.")
    return render(
        request,
        "jobs/job_detail.html",
        {
            "job": job,
            "state": selectors.job_state(job=job),
            "plotly_version": assets.plotly_version(),
            "poll_url": reverse("jobs:job_json", args=[job.id]),
        },
    )


@require_GET
@login_required
def job_json(request: HttpRequest, job_id: int) -> HttpResponse:
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    if job is None:
        return json_response({"error": "no such job in your projects"}, status=404)
    return json_response(selectors.job_state(job=job))


@require_POST
@login_required
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    if job is None:
        raise Http404("No such job in your projects.")
    try:
        services.job_cancel(job=job, user=request.user)
    except services.JobError as error:
        messages.error(request, str(error))
    return redirect(reverse("jobs:job", args=[job.id]))


# A decimal as people type it: ASCII digits, one optional point, an optional exponent
# (float() would also take "nan", "inf", "1_0" and other scripts' digits).
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _tolerance(request: HttpRequest, name: str) -> float | None:
    raw = request.POST.get(name, "").strip()
    if not raw:
        return None
    if _DECIMAL.fullmatch(raw) is None:
        raise services.JobError(f"{name} must be a decimal number")
    return float(raw)


def _size(request: HttpRequest, name: str) -> int | None:
    """A job size from the form: ASCII digits only (int() would take "4_0" and "٤")."""
    raw = request.POST.get(name, "").strip()
    if not raw:
        return None
    number = whole_number(raw)
    if number is None:
        raise services.JobError(f"{name} must be a whole number")
    return number
