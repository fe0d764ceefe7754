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

from perfweb.api.http import BadRequest, json_response, read_json
from perfweb.dashboard import assets
from perfweb.diagnostics.fix_knobs import finding_knobs
from perfweb.jobs import selectors, services
from perfweb.runs.selectors import run_get_for_user
from perfweb_agent.ab.stats import AGREEMENT_RTOL, AGREEMENT_TOP1_MIN
from perfweb_contract.jobs import MAX_ROUNDS, SIZE_LIMITS
from perfweb_contract.knobs import KNOBS, KnobError, parse_knobs, whole_number


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
            if finding_id and not knob_text:
                knobs = finding_knobs(run=run, rule_id=finding_id)
                if not knobs:
                    raise services.JobError(f"this run's finding {finding_id} has no knob value")
            else:
                knobs = parse_knobs(knob_text)
            job = services.job_create(
                user=request.user, run=run, knobs=knobs, finding_id=finding_id,
                rounds=_size(request, "rounds", 5), steps=_size(request, "steps", 20),
                max_rounds=_size(request, "max_rounds", MAX_ROUNDS),
                agreement_top1=_tolerance(request, "agreement_top1", AGREEMENT_TOP1_MIN),
                agreement_rtol=_tolerance(request, "agreement_rtol", AGREEMENT_RTOL),
            )  # fmt: skip
        except (services.JobError, KnobError, ValueError) as error:
            messages.error(request, str(error))
            return redirect(reverse("jobs:run_jobs", args=[run.run_id]))
        return redirect(reverse("jobs:job", args=[job.id]))
    return render(
        request,
        "jobs/run_jobs.html",
        {
            "run": run,
            "jobs": selectors.job_list_for_run(run=run),
            "knobs": KNOBS.values(),
            "agreement_top1": AGREEMENT_TOP1_MIN,
            "agreement_rtol": AGREEMENT_RTOL,
            "limits": {name: {"least": lo, "most": hi} for name, (lo, hi) in SIZE_LIMITS.items()},
        },
    )


@require_POST
def run_jobs_json(request: HttpRequest, run_id: str) -> HttpResponse:
    """`POST /runs/<run_id>/jobs.json`: start a job from a JSON body (the form's fields, with
    typed `knobs` or a `knob` text); 201 with the job's state, or 400 with one sentence.
    A logged-in member's session (and its CSRF token), as for the form."""
    if not request.user.is_authenticated:
        return json_response({"error": "log in to start jobs"}, status=401)
    run = run_get_for_user(user=request.user, run_id=run_id)
    if run is None:
        return json_response({"error": "no such run in your projects"}, status=404)
    try:
        body = read_json(request)
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        finding_id = _json_text(body, "finding_id")
        knob_text = _json_text(body, "knob")
        if "knobs" in body:
            knobs = body["knobs"]
        elif finding_id and not knob_text:
            knobs = finding_knobs(run=run, rule_id=finding_id)
            if not knobs:
                raise services.JobError(f"this run's finding {finding_id} has no knob value")
        else:
            knobs = parse_knobs(knob_text)
        sizes = {name: body.get(name, default) for name, default in JSON_DEFAULTS.items()}
        job = services.job_create(
            user=request.user, run=run, knobs=knobs, finding_id=finding_id, **sizes
        )
    except BadRequest as error:
        return json_response({"error": str(error)}, status=error.status)
    except services.JobError as error:
        return json_response({"error": str(error)}, status=error.status)
    except KnobError as error:
        return json_response({"error": str(error)}, status=400)
    return json_response(selectors.job_state(job=job), status=201)


# The JSON create's optional fields and their defaults (the form's).
JSON_DEFAULTS: dict[str, Any] = {
    "rounds": 5,
    "steps": 20,
    "warmup": 3,
    "max_rounds": MAX_ROUNDS,
    "agreement_top1": AGREEMENT_TOP1_MIN,
    "agreement_rtol": AGREEMENT_RTOL,
}


def _json_text(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str) or len(value) > 200:
        raise BadRequest(f"{name} must be a string of at most 200 characters")
    return value.strip()


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


def _tolerance(request: HttpRequest, name: str, default: float) -> float:
    raw = request.POST.get(name, "").strip()
    if not raw:
        return default
    if _DECIMAL.fullmatch(raw) is None:
        raise services.JobError(f"{name} must be a decimal number")
    return float(raw)


def _size(request: HttpRequest, name: str, default: int) -> int:
    """A job size from the form: ASCII digits only (int() would take "4_0" and "٤")."""
    raw = request.POST.get(name, "").strip()
    if not raw:
        return default
    number = whole_number(raw)
    if number is None:
        raise services.JobError(f"{name} must be a whole number")
    return number
