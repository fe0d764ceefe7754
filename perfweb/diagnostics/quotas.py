"""Bounds on unfinished trace uploads, checked before a chunk of a new upload is kept.

A chunked upload declares its size with its first chunk and waits on disk until its last
(uploads.py). Without a bound, a token holder could start uploads without end and fill the
disk. So the uploads in flight may declare together at most PERFWEB_TRACE_PARTIAL_RUN_BYTES
per run and PERFWEB_TRACE_PARTIAL_PROJECT_BYTES per project, and an upload must finish
within PERFWEB_TRACE_PARTIAL_TTL of its first chunk: older ones are dropped here (for the
run at hand) and by beat's sweep (for all). Checked per request: uploads that begin at the
same moment may pass together.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from perfweb.diagnostics import conf, uploads
from perfweb.diagnostics.schemas import TraceChunk
from perfweb.projects.models import Project
from perfweb.runs.models import Run


class QuotaExceeded(Exception):
    """A new upload would take its run or project over its bound (413); str() says which."""


@dataclass(frozen=True)
class Partial:
    run_id: str
    size: int  # as declared by the upload's chunks


def partials(*, run_id: str = "*") -> list[Partial]:
    """The unfinished uploads on disk (of one run, or of all), with their declared sizes."""
    found = []
    for folder in uploads.staging_folders(run_id=run_id):
        size = _declared_size(folder)
        if size is not None:
            found.append(Partial(run_id=folder.parents[3].name, size=size))
    return found


def partial_quota_check(*, project: Project, chunk: TraceChunk, now: float | None = None) -> None:
    """Raises QuotaExceeded if `chunk` begins an upload that its run's or project's bound
    cannot take; drops the run's uploads that ran out of time first."""
    now = time.time() if now is None else now
    # An upload that ran out of time is dropped, and this chunk, if of it, begins it anew.
    uploads.staging_sweep(older_than_s=conf.partial_ttl_s(), now=now, run_id=chunk.run_id)
    folder = uploads.staging(chunk)
    if folder.is_dir():
        return  # a further chunk of an upload already counted
    run_bytes = sum(p.size for p in partials(run_id=chunk.run_id))
    run_cap = conf.partial_run_bytes()
    if run_bytes + chunk.size > run_cap:
        raise QuotaExceeded(
            f"run {chunk.run_id}'s unfinished trace uploads would declare"
            f" {run_bytes + chunk.size} bytes, over its quota of {run_cap}"
        )
    project_bytes = chunk.size + _project_bytes(project=project)
    project_cap = conf.partial_project_bytes()
    if project_bytes > project_cap:
        raise QuotaExceeded(
            f"the project's unfinished trace uploads would declare {project_bytes} bytes,"
            f" over its quota of {project_cap}"
        )


def _project_bytes(*, project: Project) -> int:
    in_flight = partials()
    run_ids = {p.run_id for p in in_flight}
    mine = set(
        Run.objects.filter(project=project, run_id__in=run_ids).values_list("run_id", flat=True)
    )
    return sum(p.size for p in in_flight if p.run_id in mine)


def _declared_size(folder: Path) -> int | None:
    # The folder is named <sha256>-<size>-<chunks> (uploads._staging).
    parts = folder.name.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
