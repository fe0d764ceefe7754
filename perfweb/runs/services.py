"""Writes of the run lifecycle: start, batch, heartbeat, finish, and the lost-run sweep.

Status moves: running → finished | failed (a final finish) and running → lost (the sweep).
A lost run that reports again is running again; a finished or failed run stays so. A run one
of whose agents said at its exit that its finish waits in the spill directory on its host
(a heartbeat's `unsent`) is not lost while that finish may still come (PERFWEB_UNSENT_WAIT).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from perfweb.errors import ClientError
from perfweb.projects.models import Project
from perfweb.runs.models import Device, Run, RunProcess
from perfweb.runs.schemas import DeviceInfo, FinishRequest, StartRequest, Unsent
from perfweb.runs.signals import run_ended
from perfweb_contract import protocol


class RunNotFound(ClientError):
    """No run with that run_id in the caller's project; str() is the run_id."""

    status = 404

    def sentence(self) -> str:
        return f"run {self} was not started in this project"


class LauncherConflict(ClientError):
    """A launcher start for a run that another launcher started (409); str() says so."""

    status = 409


def to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


@transaction.atomic
def run_start(*, project: Project, request: StartRequest) -> Run:
    """Registers the run (idempotent on run_id) and the calling process within it.

    A run has one launcher: a launcher start from another agent raises LauncherConflict
    before anything is written (the same agent's start again is a retry, answered as the
    first)."""
    now = timezone.now()
    started_at = to_datetime(request.started_at)
    run = Run.objects.select_for_update().filter(run_id=request.run_id).first()
    if run is None:
        run = _run_create(project=project, request=request, now=now)
    elif run.project_id != project.id:
        raise RunNotFound(request.run_id)
    else:
        _run_merge(run=run, request=request, now=now)
    RunProcess.objects.update_or_create(
        run=run,
        agent_id=request.agent_id,
        defaults={
            "role": request.role,
            "rank": request.rank,
            "local_rank": request.local_rank,
            "world_size": request.world_size,
            "pid": request.pid,
            "host": request.host,
            "last_seen_at": now,
        },
        create_defaults={
            "role": request.role,
            "rank": request.rank,
            "local_rank": request.local_rank,
            "world_size": request.world_size,
            "pid": request.pid,
            "host": request.host,
            "started_at": started_at,
            "last_seen_at": now,
        },
    )
    devices_upsert(run=run, devices=request.devices)
    return run


def _run_create(*, project: Project, request: StartRequest, now: datetime) -> Run:
    try:
        with transaction.atomic():
            return Run.objects.create(
                project=project,
                run_id=request.run_id,
                name=request.name or request.run_id,
                command=request.command,
                cwd=request.cwd,
                host=request.host,
                started_at=to_datetime(request.started_at),
                last_seen_at=now,
                facts=request.facts,
                tags=request.tags,
            )
    except IntegrityError:  # another process of the run started it at the same moment
        run = Run.objects.select_for_update().get(run_id=request.run_id)
        if run.project_id != project.id:
            raise RunNotFound(request.run_id) from None
        _run_merge(run=run, request=request, now=now)
        return run


def _run_merge(*, run: Run, request: StartRequest, now: datetime) -> None:
    # The launcher knows the real command line; a worker's start fills only what is blank.
    launcher = request.role == protocol.ROLE_LAUNCHER
    if launcher:
        _launcher_check(run=run, agent_id=request.agent_id)
    if request.name and (launcher or run.name == run.run_id):
        run.name = request.name
    for field in ("command", "cwd", "host"):
        if getattr(request, field) and (launcher or not getattr(run, field)):
            setattr(run, field, getattr(request, field))
    run.started_at = min(run.started_at, to_datetime(request.started_at))
    run.facts = {**run.facts, **request.facts}
    run.tags = {**run.tags, **request.tags}
    run.last_seen_at = now
    if run.status == Run.LOST:
        run.status = Run.RUNNING
    run.save()


def _launcher_check(*, run: Run, agent_id: str) -> None:
    other = (
        RunProcess.objects.filter(run=run, role=protocol.ROLE_LAUNCHER)
        .exclude(agent_id=agent_id)
        .values_list("agent_id", flat=True)
        .first()
    )
    if other is not None:
        raise LauncherConflict(f"run {run.run_id} already has a launcher (agent {other})")


def _run_seen(*, run: Run) -> None:
    Run.objects.filter(id=run.id).update(last_seen_at=timezone.now())
    Run.objects.filter(id=run.id, status=Run.LOST).update(status=Run.RUNNING)


def run_facts_merge(*, run_pk: int, facts: dict[str, object]) -> None:
    """Merges facts into the run's (later wins). Call with the run's row locked, so that
    this read-merge-write loses no other process's facts."""
    current = Run.objects.values_list("facts", flat=True).get(id=run_pk)
    Run.objects.filter(id=run_pk).update(facts={**current, **facts})


def _run_for(*, project: Project, run_id: str) -> Run:
    run = Run.objects.select_for_update().filter(run_id=run_id, project=project).first()
    if run is None:
        raise RunNotFound(run_id)
    return run


def run_heartbeat(
    *, project: Project, run_id: str, agent_id: str, unsent: Unsent | None = None
) -> None:
    """A sign of life; with `unsent`, the process has ended and its finish waits on its
    host (kept with the exit code it will carry, until that finish arrives)."""
    now = timezone.now()
    with transaction.atomic():
        run = _run_for(project=project, run_id=run_id)
        process = RunProcess.objects.filter(run=run, agent_id=agent_id)
        process.update(last_seen_at=now)
        if unsent is not None:
            process.filter(ended_at=None).update(unsent_at=now, exit_code=unsent.exit_code)
        _run_seen(run=run)


def run_finish(*, project: Project, request: FinishRequest) -> Run:
    """The process has ended; a final finish ends the run. Idempotent."""
    now = timezone.now()
    ended_at = to_datetime(request.ended_at) if request.ended_at is not None else now
    with transaction.atomic():
        run = _run_for(project=project, run_id=request.run_id)
        RunProcess.objects.filter(run=run, agent_id=request.agent_id, ended_at=None).update(
            ended_at=ended_at, exit_code=request.exit_code, last_seen_at=now
        )
        if request.produced:
            RunProcess.objects.filter(run=run, agent_id=request.agent_id).update(
                produced=request.produced
            )
        Run.objects.filter(id=run.id).update(last_seen_at=now)
        if request.final:
            status = Run.FINISHED if request.exit_code == 0 else Run.FAILED
            ended = (
                Run.objects.filter(id=run.id)
                .exclude(status__in=(Run.FINISHED, Run.FAILED))
                .update(status=status, exit_code=request.exit_code, ended_at=ended_at)
            )
            if ended:  # the series app compacts its last chunks (perfweb.series.signals)
                run_ended.send(sender=Run, run_pk=run.pk)
        run.refresh_from_db()
    return run


def runs_mark_lost(
    *, silent_for: float, unsent_wait: float | None = None, now: datetime | None = None
) -> int:
    """Marks running runs whose agents have all been silent for `silent_for` seconds as lost;
    returns how many. A run is spared while one of its processes said, less than
    `unsent_wait` seconds ago (PERFWEB_UNSENT_WAIT by default), that its finish waits in the
    spill directory on its host and that finish has not arrived."""
    now = now or timezone.now()
    wait = settings.PERFWEB_UNSENT_WAIT if unsent_wait is None else unsent_wait
    awaited = RunProcess.objects.filter(
        run=OuterRef("pk"), ended_at=None, unsent_at__gte=now - timedelta(seconds=wait)
    )
    silent = Run.objects.filter(
        status=Run.RUNNING, last_seen_at__lt=now - timedelta(seconds=silent_for)
    )
    return silent.exclude(Exists(awaited)).update(status=Run.LOST)


def devices_upsert(*, run: Run, devices: list[DeviceInfo]) -> None:
    for device in devices:
        Device.objects.update_or_create(
            run=run,
            key=device.key,
            defaults={
                "kind": device.kind or device.key.split(":")[0],
                "index": device.index,
                "name": device.name,
                "uuid": device.uuid,
                "memory_total": device.memory_total,
                "power_limit": device.power_limit,
                "extra": device.extra,
            },
        )
