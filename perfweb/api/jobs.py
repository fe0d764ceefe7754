"""The runner's endpoints (`/api/v1/jobs/...`, project token; docs/jobs.md): parse, call one
jobs service, reply. Routed by perfweb/api/urls.py; errors are mapped by perfweb.api.endpoint."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse

from perfweb.api.endpoint import TOKEN, endpoint
from perfweb.http.bodies import BadRequest, error_response, json_response, read_json
from perfweb.jobs import services
from perfweb.jobs.models import Job
from perfweb.jobs.selectors import job_for_runner
from perfweb.projects.models import Project
from perfweb_contract import protocol
from perfweb_contract.jobs import RUNNER_ID_MAX


def runner_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """POST, token auth, JSON object body; the view gets the body, the project (and job)."""

    @endpoint("POST", auth=TOKEN)
    @wraps(view)
    def wrapper(request: HttpRequest, *, project: Project, **kwargs: Any) -> HttpResponse:
        body = read_json(request)
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if "job_id" in kwargs:
            job = (
                Job.objects.select_related("run")
                .filter(id=kwargs.pop("job_id"), project=project)
                .first()
            )
            if job is None:
                return error_response("no such job in this project", 404)
            kwargs["job"] = job
        return view(body, project=project, **kwargs)

    return wrapper


def _text(body: dict[str, Any], name: str, limit: int = protocol.HOST_MAX) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise BadRequest(f"{name} must be a non-empty string of at most {limit} characters")
    return value.strip()


@runner_view
def claim(body: dict[str, Any], *, project: Project) -> HttpResponse:
    claimed = services.job_claim(
        project=project, host=_text(body, "host"), runner_id=_text(body, "runner_id", RUNNER_ID_MAX)
    )
    if claimed is None:
        return json_response({"ok": True, "job": None})
    job, secret = claimed
    return json_response({"ok": True, "job": job_for_runner(job=job, claim_secret=secret)})


@runner_view
def progress(body: dict[str, Any], *, project: Project, job: Job) -> HttpResponse:
    arm = body.get("arm")
    if arm is not None and not isinstance(arm, dict):
        raise BadRequest("arm must be an object")
    cancelled = services.job_progress(job=job, claim_token=_text(body, "claim_token"), arm=arm)
    return json_response({"ok": True, "cancelled": cancelled})


@runner_view
def result(body: dict[str, Any], *, project: Project, job: Job) -> HttpResponse:
    # The body's "result" is the runner's own view; the server recomputes it from the arms.
    done = services.job_finish(job=job, claim_token=_text(body, "claim_token"))
    return json_response({"ok": True, "status": done.status, "verdict": done.verdict})


@runner_view
def fail(body: dict[str, Any], *, project: Project, job: Job) -> HttpResponse:
    raw = body.get("reason")
    reason = raw if isinstance(raw, str) and raw.strip() else "failed"
    done = services.job_fail(job=job, claim_token=_text(body, "claim_token"), reason=reason)
    return json_response({"ok": True, "status": done.status})
