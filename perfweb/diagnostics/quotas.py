"""Bounds on a run's and a project's traces, checked before a chunk of a new upload is kept.

A chunked upload declares its size with its first chunk and waits on disk until its last
(uploads.py); each chunk's length is its place in that size (schemas.chunk_stride), so an
upload's staged chunks hold at most what it declared, and a finished trace is exactly its
size. The bytes counted here are the bytes on disk. Without bounds a token holder could
start uploads without end, or finish them without end, and fill the disk. So:

- unfinished uploads may declare together at most PERFWEB_TRACE_PARTIAL_RUN_BYTES per run
  and PERFWEB_TRACE_PARTIAL_PROJECT_BYTES per project, and must finish within
  PERFWEB_TRACE_PARTIAL_TTL of their first chunk: older ones are dropped here (for the run
  at hand) and by beat's sweep (for all);
- finished and unfinished traces together number at most PERFWEB_TRACE_RUN_MAX per run and
  PERFWEB_TRACE_PROJECT_MAX per project, and hold at most PERFWEB_TRACE_RUN_BYTES per run
  and PERFWEB_TRACE_PROJECT_BYTES per project.

Checked per request: uploads that begin at the same moment may pass together.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from django.db.models import Count, QuerySet, Sum

from perfweb.diagnostics import conf, uploads
from perfweb.diagnostics.models import Trace
from perfweb.diagnostics.schemas import TraceChunk
from perfweb.errors import ClientError
from perfweb.projects.models import Project
from perfweb.runs.models import Run


class QuotaExceeded(ClientError):
    """A new upload would take its run or project over its bound (413); str() says which."""

    status = 413


@dataclass(frozen=True)
class Partial:
    run_id: str
    size: int  # as declared by the upload's chunks: at most what its chunks hold on disk


@dataclass(frozen=True)
class Held:
    """What a run or a project holds: traces (finished and unfinished) and their bytes."""

    traces: int
    bytes: int


def partials(*, run_id: str = "*") -> list[Partial]:
    """The unfinished uploads on disk (of one run, or of all), with their declared sizes."""
    found = []
    for folder in uploads.staging_folders(run_id=run_id):
        size = _declared_size(folder)
        if size is not None:
            found.append(Partial(run_id=folder.parents[3].name, size=size))
    return found


def upload_quota_check(
    *, project: Project, run: Run, chunk: TraceChunk, now: float | None = None
) -> None:
    """Raises QuotaExceeded if `chunk` begins an upload that its run's or project's bounds
    cannot take; drops the run's uploads that ran out of time first."""
    now = time.time() if now is None else now
    # An upload that ran out of time is dropped, and this chunk, if of it, begins it anew.
    uploads.staging_sweep(older_than_s=conf.partial_ttl_s(), now=now, run_id=chunk.run_id)
    if uploads.staging(chunk).is_dir():
        return  # a further chunk of an upload already counted
    run_partials = partials(run_id=chunk.run_id)
    project_partials = _project_partials(project=project)
    _check(
        f"run {chunk.run_id}'s unfinished trace uploads would declare",
        sum(p.size for p in run_partials) + chunk.size,
        conf.partial_run_bytes(),
        "bytes",
    )
    _check(
        "the project's unfinished trace uploads would declare",
        sum(p.size for p in project_partials) + chunk.size,
        conf.partial_project_bytes(),
        "bytes",
    )
    held = _held(Trace.objects.filter(run=run), run_partials)
    _check(f"run {chunk.run_id} would hold", held.traces + 1, conf.run_traces(), "traces")
    _check(
        f"run {chunk.run_id}'s traces would hold",
        held.bytes + chunk.size,
        conf.run_trace_bytes(),
        "bytes",
    )
    held = _held(Trace.objects.filter(run__project=project), project_partials)
    _check("the project would hold", held.traces + 1, conf.project_traces(), "traces")
    _check(
        "the project's traces would hold",
        held.bytes + chunk.size,
        conf.project_trace_bytes(),
        "bytes",
    )


def _check(what: str, total: int, cap: int, unit: str) -> None:
    if total > cap:
        kind = "limit" if unit == "traces" else "quota"
        raise QuotaExceeded(f"{what} {total} {unit}, over its {kind} of {cap}")


def _held(finished: QuerySet[Trace], staged: list[Partial]) -> Held:
    totals = finished.aggregate(traces=Count("id"), bytes=Sum("size"))
    return Held(
        traces=totals["traces"] + len(staged),
        bytes=(totals["bytes"] or 0) + sum(p.size for p in staged),
    )


def _project_partials(*, project: Project) -> list[Partial]:
    in_flight = partials()
    run_ids = {p.run_id for p in in_flight}
    mine = set(
        Run.objects.filter(project=project, run_id__in=run_ids).values_list("run_id", flat=True)
    )
    return [p for p in in_flight if p.run_id in mine]


def _declared_size(folder: Path) -> int | None:
    # The folder is named <sha256>-<size>-<chunks>-<stride> (uploads._staging); before the
    # stride was part of it, <sha256>-<size>-<chunks>.
    parts = folder.name.split("-")
    return int(parts[1]) if len(parts) in (3, 4) and parts[1].isdigit() else None
