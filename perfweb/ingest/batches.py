"""The ingest hot path: one batch stored once, in one short transaction.

Everything that needs no database (validation, packing the chunks) happens before the
transaction. The run's id and its series' ids come from this process's memory after the
run's first batch here (see _Known), else from one query. On PostgreSQL, where every
statement is a round trip to another process, a batch is then one statement: bookkeeping
(receipt, process, run) and the chunks' insert, a transaction by itself. On SQLite, which
runs in our process, it is an IMMEDIATE transaction of three bookkeeping statements and an
executemany. Plain SQL throughout: a batch arrives every few seconds from every rank of
every run, and the ORM's per-query cost would dominate.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from perfweb.db import (
    ByteaArray,
    Float8Array,
    Int4Array,
    Int8Array,
    bytea_array,
    number_array,
    prepared_cursor,
)
from perfweb.projects.models import Project
from perfweb.runs.models import BatchReceipt, Run, RunProcess
from perfweb.runs.schemas import BatchRequest
from perfweb.runs.services import RunNotFound, devices_upsert, run_facts_merge
from perfweb.series.models import Chunk, Series
from perfweb.series.services import (
    CHUNK_COLUMNS,
    COPY_TYPES,
    PreparedChunk,
    chunks_insert,
    chunks_prepare,
    series_ids,
)

RUNS = Run._meta.db_table
RECEIPTS = BatchReceipt._meta.db_table
PROCESSES = RunProcess._meta.db_table
SERIES = Series._meta.db_table
CHUNKS = Chunk._meta.db_table
ROLE_UNANNOUNCED = "worker"  # the role of an agent whose start never arrived


@dataclass(frozen=True)
class BatchResult:
    duplicate: bool
    samples: int
    steps: int


SeriesIds = dict[tuple[str, str], int]


class _Known:
    """The runs' primary keys and series ids this process has read, by (project, run_id).

    Ids are never reused (PostgreSQL's sequences; SQLite's AUTOINCREMENT), and a run's
    series are only ever added, never removed while the run exists. So an entry stays right
    for as long as its run exists, which the bookkeeping checks in every batch's transaction,
    holding the run's row (PostgreSQL) or the write lock (SQLite): a batch whose run has
    gone reads the database again, once.
    Series that another process created since are read when a batch names them. Ids read
    inside a transaction are remembered only once it has committed.
    """

    MAX_RUNS = 10_000  # about 100 series each: a few MB at most

    def __init__(self) -> None:
        self._runs: dict[tuple[int, str], tuple[Run, SeriesIds]] = {}

    def get(self, project: Project, run_id: str) -> tuple[Run, SeriesIds] | None:
        return self._runs.get((project.id, run_id))

    def remember(self, run: Run, ids: SeriesIds) -> None:
        if len(self._runs) >= self.MAX_RUNS:
            self._runs.clear()  # rare; the next batch of each run reads again
        self._runs[run.project_id, run.run_id] = (run, ids)

    def forget(self, project: Project, run_id: str) -> None:
        self._runs.pop((project.id, run_id), None)

    def clear(self) -> None:
        """Forget everything (a test whose database was rolled back reuses ids)."""
        self._runs.clear()


known_ids = _Known()


def batch_store(*, project: Project, request: BatchRequest) -> BatchResult:
    """Stores the batch once: its receipt and its data commit together or not at all."""
    chunks = chunks_prepare(samples=request.metrics + request.steps)
    remembered = known_ids.get(project, request.run_id)
    try:
        return _store(project=project, request=request, chunks=chunks, remembered=remembered)
    except RunNotFound:
        if remembered is None:
            raise
        known_ids.forget(project, request.run_id)  # the run has gone: is there a new one?
        return _store(project=project, request=request, chunks=chunks, remembered=None)


def _store(
    *,
    project: Project,
    request: BatchRequest,
    chunks: list[PreparedChunk],
    remembered: tuple[Run, SeriesIds] | None,
) -> BatchResult:
    with prepared_cursor() as cursor:
        # Read before the write transaction: on SQLite every ingest request queues for the
        # one write lock, so it is held for the writes only (new series are created under it).
        if remembered is None:
            remembered = _run_and_series(cursor, project=project, run_id=request.run_id)
            known_ids.remember(*remembered)
        run, known = remembered
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        write = _write_postgresql if connection.vendor == "postgresql" else _write_sqlite
        ids = write(cursor, run=run, known=known, request=request, chunks=chunks, now=now)
    if ids is None:
        return BatchResult(duplicate=True, samples=0, steps=0)
    if ids is not known:  # series created or read in the transaction, now committed
        known_ids.remember(run, ids)
    return BatchResult(duplicate=False, samples=request.sample_count, steps=request.step_count)


def _write_sqlite(
    cursor: CursorWrapper,
    *,
    run: Run,
    known: SeriesIds,
    request: BatchRequest,
    chunks: list[PreparedChunk],
    now: object,
) -> SeriesIds | None:
    """The batch in one transaction; the series' ids it used, None for a duplicate."""
    with transaction.atomic():
        if _bookkeep(cursor, run=run, request=request, now=now) is None:
            return None
        ids = series_ids(run=run, keys={(c.device, c.name) for c in chunks}, known=known)
        chunks_insert(rows=[(ids[c.device, c.name], *c.columns) for c in chunks], cursor=cursor)
        _facts_and_devices(run=run, request=request)
    return ids


def _write_postgresql(
    cursor: CursorWrapper,
    *,
    run: Run,
    known: SeriesIds,
    request: BatchRequest,
    chunks: list[PreparedChunk],
    now: object,
) -> SeriesIds | None:
    """The batch in one statement (see _bookkeep_postgresql), which is a transaction of its
    own: one round trip to PostgreSQL in the steady state. A batch that brings new series,
    facts or devices (a run's first, mostly) needs a few statements in a transaction: the
    run's row is locked first there too, before the series are created, as another rank of
    the run may be creating the same ones."""
    keys = {(c.device, c.name) for c in chunks}
    alone = keys <= known.keys() and not (request.facts or request.devices or request.run_name)
    with contextlib.nullcontext() if alone else transaction.atomic():
        if not alone:
            _lock_run(cursor, run=run)
        ids = known if alone else series_ids(run=run, keys=keys, known=known)
        rows = [(ids[c.device, c.name], *c.columns) for c in chunks]
        if not _bookkeep_postgresql(cursor, run=run, request=request, now=now, rows=rows):
            return None
        if not alone:
            _facts_and_devices(run=run, request=request)
    return ids


def _facts_and_devices(*, run: Run, request: BatchRequest) -> None:
    if request.facts:
        run_facts_merge(run_pk=run.id, facts=request.facts)
    if request.run_name:
        Run.objects.filter(id=run.id).update(name=request.run_name)
    devices_upsert(run=run, devices=request.devices)


def _lock_run(cursor: CursorWrapper, *, run: Run) -> None:
    cursor.execute(
        f"SELECT 1 FROM {RUNS} WHERE id = %s AND run_id = %s FOR UPDATE", [run.id, run.run_id]
    )
    if cursor.fetchone() is None:  # gone since it was read
        raise RunNotFound(run.run_id)


def _run_and_series(
    cursor: CursorWrapper, *, project: Project, run_id: str
) -> tuple[Run, dict[tuple[str, str], int]]:
    """The run and its series' ids, in one query."""
    cursor.execute(
        f"SELECT r.id, s.device, s.name, s.id FROM {RUNS} r LEFT JOIN {SERIES} s"
        " ON s.run_id = r.id WHERE r.run_id = %s AND r.project_id = %s",
        [run_id, project.id],
    )
    rows = cursor.fetchall()
    if not rows:
        raise RunNotFound(run_id)
    run = Run(id=rows[0][0], run_id=run_id, project_id=project.id)
    return run, {(device, name): pk for _, device, name, pk in rows if pk is not None}


def _bookkeep(cursor: CursorWrapper, *, run: Run, request: BatchRequest, now: object) -> int | None:
    """The receipt, then the process's and the run's counters and last-seen times; returns
    the process's step count so far, None for a batch already stored. On SQLite, whose
    IMMEDIATE transactions hold the one write lock from their first statement."""
    cursor.execute(
        f"INSERT INTO {RECEIPTS} (run_id, agent_id, seq, samples, received_at)"
        f" SELECT id, %s, %s, %s, %s FROM {RUNS} WHERE id = %s AND run_id = %s"
        " ON CONFLICT (run_id, agent_id, seq) DO NOTHING",
        [request.agent_id, request.seq, request.sample_count, now, run.id, run.run_id],
    )
    if cursor.rowcount != 1:
        cursor.execute(f"SELECT 1 FROM {RUNS} WHERE id = %s AND run_id = %s", [run.id, run.run_id])
        if cursor.fetchone() is None:  # gone since it was read
            raise RunNotFound(run.run_id)
        return None
    steps = _process_seen(cursor, run=run, request=request, now=now)
    _run_seen(cursor, run=run, steps=steps, now=now)
    return steps


# Chunk rows as arrays, one per column (series_id, *CHUNK_COLUMNS), typed as COPY types them.
_ARRAYS = tuple(
    {"int8": Int8Array, "int4": Int4Array, "float8": Float8Array, "bytea": ByteaArray}[name]
    for name in COPY_TYPES
)
_CHUNK_WRITE = (
    f" chunks AS (INSERT INTO {CHUNKS} (series_id, {', '.join(CHUNK_COLUMNS)})"
    f" SELECT * FROM unnest({', '.join(f'%(c{i})s' for i in range(len(_ARRAYS)))})"
    " WHERE EXISTS (SELECT FROM receipt))"
)


def _bookkeep_postgresql(
    cursor: CursorWrapper,
    *,
    run: Run,
    request: BatchRequest,
    now: object,
    rows: list[tuple[object, ...]],
) -> bool:
    """_bookkeep and the chunks' insert in one statement; False for a batch already stored.
    The run's row is locked first, as heartbeat and finish lock it before the process's row:
    a batch that took the process's row first could deadlock with its own agent's finish.
    The process's row is created if the agent's start never arrived."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(_ARRAYS)
    arrays = {
        f"c{i}": bytea_array(values) if kind is ByteaArray else number_array(kind, values)
        for i, (kind, values) in enumerate(zip(_ARRAYS, columns, strict=True))
    }
    cursor.execute(
        f"WITH locked AS (SELECT id FROM {RUNS} WHERE id = %(run)s AND run_id = %(run_id)s"
        " FOR UPDATE),"
        f" receipt AS (INSERT INTO {RECEIPTS} (run_id, agent_id, seq, samples, received_at)"
        " SELECT id, %(agent)s, %(seq)s, %(samples)s, %(now)s FROM locked"
        " ON CONFLICT (run_id, agent_id, seq) DO NOTHING RETURNING run_id),"
        f" process AS (UPDATE {PROCESSES} SET last_seen_at = %(now)s,"
        " step_count = step_count + %(steps)s, dropped = GREATEST(dropped, %(dropped)s)"
        " WHERE run_id = (SELECT run_id FROM receipt) AND agent_id = %(agent)s"
        " RETURNING step_count),"
        f" born AS (INSERT INTO {PROCESSES} (run_id, agent_id, role, host, started_at,"
        " last_seen_at, step_count, dropped, produced)"
        " SELECT run_id, %(agent)s, %(role)s, '', %(now)s, %(now)s, %(steps)s, %(dropped)s, '{}'"
        " FROM receipt WHERE NOT EXISTS (SELECT FROM process) RETURNING step_count),"
        f" seen AS (UPDATE {RUNS} SET last_seen_at = %(now)s, step_count = GREATEST(step_count,"
        " (SELECT step_count FROM process), (SELECT step_count FROM born)),"
        " status = CASE WHEN status = %(lost)s THEN %(running)s ELSE status END"
        " WHERE id = (SELECT run_id FROM receipt)),"
        f"{_CHUNK_WRITE}"
        " SELECT EXISTS (SELECT FROM locked), EXISTS (SELECT FROM receipt)",
        {
            "run": run.id,
            "run_id": run.run_id,
            "agent": request.agent_id,
            "role": ROLE_UNANNOUNCED,
            "seq": request.seq,
            "samples": request.sample_count,
            "now": now,
            "steps": request.step_count,
            "dropped": request.dropped,
            "lost": Run.LOST,
            "running": Run.RUNNING,
            **arrays,
        },
    )
    found, stored = cursor.fetchone()
    if not found:  # gone since it was read
        raise RunNotFound(run.run_id)
    return bool(stored)


def _run_seen(cursor: CursorWrapper, *, run: Run, steps: int, now: object) -> None:
    cursor.execute(
        f"UPDATE {RUNS} SET last_seen_at = %s,"
        " step_count = CASE WHEN step_count > %s THEN step_count ELSE %s END,"
        " status = CASE WHEN status = %s THEN %s ELSE status END WHERE id = %s",
        [now, steps, steps, Run.LOST, Run.RUNNING, run.id],
    )


def _process_seen(cursor: CursorWrapper, *, run: Run, request: BatchRequest, now: object) -> int:
    """Marks the agent seen and adds its steps; returns its step count so far."""
    cursor.execute(
        f"UPDATE {PROCESSES} SET last_seen_at = %s, step_count = step_count + %s,"
        " dropped = CASE WHEN dropped > %s THEN dropped ELSE %s END"
        " WHERE run_id = %s AND agent_id = %s RETURNING step_count",
        [now, request.step_count, request.dropped, request.dropped, run.id, request.agent_id],
    )
    row = cursor.fetchone()
    if row is not None:
        return int(row[0])
    RunProcess.objects.create(  # an agent whose start we never saw
        run=run,
        agent_id=request.agent_id,
        role=ROLE_UNANNOUNCED,
        started_at=timezone.now(),
        last_seen_at=timezone.now(),
        step_count=request.step_count,
        dropped=request.dropped,
    )
    return request.step_count
