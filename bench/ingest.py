"""Ingest throughput through the real HTTP endpoint vs a raw bulk load of the same rows, and
the bytes stored per sample.

    python bench/ingest.py                      # SQLite and PostgreSQL, 5 rounds each
    python bench/ingest.py --db sqlite --rounds 3 --batches 20

HTTP: gunicorn on 127.0.0.1, `--agents` concurrent clients (one run each) posting gzipped
batches of 8 GPUs × 12 metrics at `--hz` for `--batch-seconds`, plus process metrics and
steps, their arrays packed as the agent sends them (`--arrays plain`: JSON numbers). Raw:
the same kind of batches, already as one float64 array per series, turned into chunk rows by
the very code the endpoint uses (`chunks_prepare`) and loaded into the same table (same
indexes) in one transaction by the bulk insert that compaction uses: binary COPY on
PostgreSQL, executemany on SQLite. Raw is reported with the packing (pack + load) and
without it (rows prebuilt, load only). Rounds alternate raw and HTTP, and each round's ratio
compares the two halves of the same round (the machines are noisy); the ratios reported are
the medians of those. Bytes: the chunk and series tables with their indexes (and TOAST), as
ingested and after compaction, per sample. Writes bench/results/ingest-<db>.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import orjson
import server_harness as h
from workload import AgentStream

TABLES = ("series_chunk", "series_series")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--agents", type=int, default=8, help="concurrent posting clients")
    parser.add_argument("--batches", type=int, default=30, help="batches per agent per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument(
        "--threads", type=int, default=1, help="threads per worker (the Procfile runs 2 × 4)"
    )
    parser.add_argument(
        "--arrays",
        choices=["packed", "plain"],
        default="packed",
        help="the batches' arrays packed, as the agent sends them to this server, or plain "
        "JSON numbers (docs/protocol.md)",
    )
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--batch-seconds", type=float, default=5.0)
    args = parser.parse_args()
    if args.db == "both":
        for kind in ("sqlite", "postgresql"):
            argv = [a for a in sys.argv[1:]]
            subprocess.run([sys.executable, __file__, *argv, "--db", kind], check=True)
        return
    run(args)


def run(args: argparse.Namespace) -> None:
    with h.database(args.db) as db:
        h.setup_django(db)
        with h.server(db, workers=args.workers, threads=args.threads) as (host, port):
            rounds = [
                {"raw": raw_round(db, args, r), "http": http_round(db, host, port, args, r)}
                for r in range(args.rounds)
            ]
            floor = floor_round(db, host, port, args)
        http_rounds, raw_rounds = [r["http"] for r in rounds], [r["raw"] for r in rounds]
        samples = _stored_samples()
        db.vacuum_analyze(TABLES)
        ingested = db.storage_bytes(TABLES)
        compact_s = compact_all()
        if db.kind == "postgresql":
            _vacuum_full(db)
        compacted = db.storage_bytes(TABLES)
        row_per_sample = row_per_sample_load(db, args)

    def ratio(http: str, raw: str) -> float:
        return h.median([r["http"][http] / r["raw"][raw] for r in rounds])

    http_rate = h.median([r["samples_per_s"] for r in http_rounds])
    load_rate = h.median([r["load_samples_per_s"] for r in raw_rounds])
    full_rate = h.median([r["pack_and_load_samples_per_s"] for r in raw_rounds])
    row_rate = row_per_sample["samples_per_s"]
    row_bytes = row_per_sample["bytes_per_sample"]
    result = {
        "db": args.db,
        "config": vars(args),
        "http": http_rounds,
        "raw": raw_rounds,
        "http_samples_per_s_median": http_rate,
        "raw_load_samples_per_s_median": load_rate,
        "raw_pack_and_load_samples_per_s_median": full_rate,
        "ratio_http_vs_raw_load": ratio("samples_per_s", "load_samples_per_s"),
        "ratio_http_vs_raw_pack_and_load": ratio("samples_per_s", "pack_and_load_samples_per_s"),
        "ratio_http_vs_raw_per_cpu_second": ratio("samples_per_cpu_s", "samples_per_cpu_s"),
        "http_server_cpu_ms_per_batch_median": h.median(
            [1000 * r["cpu_s"]["server"] / r["batches"] for r in http_rounds]
        ),
        "row_per_sample_load_samples_per_s": row_rate,
        "row_per_sample_bytes_per_sample": row_bytes,
        "ratio_http_vs_row_per_sample_load": http_rate / row_rate,
        "orm_object_per_sample_samples_per_s": row_per_sample["orm_samples_per_s"],
        "ratio_http_vs_orm_object_per_sample": http_rate / row_per_sample["orm_samples_per_s"],
        "request_floor": floor,
        "raw_pack_and_load_ms_per_batch": 1000 * samples_per_batch(rounds) / full_rate,
        "samples_stored": samples,
        "bytes_per_sample_as_ingested": ingested / samples,
        "bytes_per_sample_after_compaction": compacted / samples,
        "compaction_samples_per_s": samples / compact_s,
    }
    suffix = f"-{args.workers}x{args.threads}" if args.threads > 1 else ""
    suffix += "-plain" if args.arrays == "plain" else ""
    path = h.write_result(f"ingest-{args.db}{suffix}", result)
    print(
        f"[{args.db}] HTTP ingest median {http_rate:,.0f} samples/s "
        f"(p95 batch latency {h.median([r['p95_latency_ms'] for r in http_rounds]):.0f} ms, "
        f"server CPU {result['http_server_cpu_ms_per_batch_median']:.1f} ms per batch)"
    )
    print(
        f"[{args.db}] raw bulk load {load_rate:,.0f} samples/s (rows prebuilt), "
        f"{full_rate:,.0f} samples/s (packing included)"
    )
    print(
        f"[{args.db}] ratio HTTP/raw, median of {args.rounds} paired rounds: "
        f"{result['ratio_http_vs_raw_pack_and_load']:.2f} (vs pack+load), "
        f"{result['ratio_http_vs_raw_load']:.2f} (vs load only); goal >= 0.5"
    )
    print(
        f"[{args.db}] bytes/sample incl. indexes: {ingested / samples:.2f} as ingested, "
        f"{compacted / samples:.2f} after compaction (goal <= 16); "
        f"compaction {samples / compact_s:,.0f} samples/s"
    )
    busy = h.median([r["cores_busy"] for r in http_rounds])
    print(
        f"[{args.db}] per CPU-second of server + client + database processes: HTTP/raw "
        f"{result['ratio_http_vs_raw_per_cpu_second']:.2f}; HTTP kept {busy:.2f} of "
        f"{os.cpu_count()} cores busy (load avg {os.getloadavg()[0]:.1f})"
    )
    print(
        f"[{args.db}] a request rejected before any storing (a malformed batch, 400): "
        f"server {floor['server_cpu_ms']:.2f} ms, database {floor['database_cpu_ms']:.2f} ms, "
        f"client {floor['client_cpu_ms']:.2f} ms of CPU; the raw load's whole batch "
        f"({samples_per_batch(rounds):,.0f} samples, packing included): "
        f"{result['raw_pack_and_load_ms_per_batch']:.2f} ms"
    )
    orm_rate = row_per_sample["orm_samples_per_s"]
    print(
        f"[{args.db}] a row per sample instead: raw load {row_rate:,.0f} samples/s, "
        f"{row_bytes:.0f} bytes/sample (HTTP/that {http_rate / row_rate:.2f}); one ORM object "
        f"per sample, bulk_create: {orm_rate:,.0f} samples/s (HTTP/that {http_rate / orm_rate:.1f})"
    )
    print(f"[{args.db}] wrote {path}")


def http_round(
    db: h.Database, host: str, port: int, args: argparse.Namespace, round_no: int
) -> dict[str, Any]:
    agents = [
        AgentStream(hz=args.hz, batch_seconds=args.batch_seconds, seed=round_no * 1000 + i)
        for i in range(args.agents)
    ]
    plans = []
    for agent in agents:
        status, _ = h.request(
            host,
            port,
            "POST",
            "/api/v1/ingest/start",
            token=db.token,
            body=h.gz(agent.start_body()),
            gzipped=True,
        )
        assert status == 200, status
        batches = [agent.next_batch() for _ in range(args.batches)]
        if args.arrays == "packed":
            batches = [(packed(body), samples) for body, samples in batches]
        plans.append([(h.gz(body), samples) for body, samples in batches])
    latencies: list[float] = []
    failures: list[int] = []

    def post_all(plan: list[tuple[bytes, int]]) -> None:
        for body, _ in plan:
            began = time.perf_counter()
            status, _ = h.request(
                host, port, "POST", "/api/v1/ingest/batch", token=db.token, body=body, gzipped=True
            )
            latencies.append(time.perf_counter() - began)
            if status != 200:
                failures.append(status)

    threads = [threading.Thread(target=post_all, args=(plan,)) for plan in plans]
    wall, cpu = run_clients(db, threads)
    server_cpu, client_cpu, database_cpu = cpu["server"], cpu["client"], cpu["database"]
    samples = sum(s for plan in plans for _, s in plan)
    assert not failures, f"non-200 answers: {failures[:10]}"
    return {
        "round": round_no,
        "samples": samples,
        "batches": len(latencies),
        "wall_s": wall,
        "samples_per_s": samples / wall,
        "cpu_s": {"server": server_cpu, "client": client_cpu, "database": database_cpu},
        "samples_per_cpu_s": samples / (server_cpu + client_cpu + database_cpu),
        "cores_busy": (server_cpu + client_cpu + database_cpu) / wall,
        "p50_latency_ms": 1000 * h.median(latencies),
        "p95_latency_ms": 1000 * h.percentile(latencies, 95),
        "bytes_on_wire_per_batch": int(np.mean([len(b) for plan in plans for b, _ in plan])),
    }


def floor_round(
    db: h.Database, host: str, port: int, args: argparse.Namespace, requests: int = 100
) -> dict[str, Any]:
    """What a request costs before any storing: the same clients each posting, `requests`
    times, a small batch that the server reads and rejects (token, body, parsing, the 400
    and Django's log line for it). CPU per request of the server, the database and the
    clients."""
    body = orjson.dumps({"run_id": "0" * 32, "agent_id": "0" * 32, "seq": -1})
    statuses: list[int] = []

    def post_all() -> None:
        for _ in range(requests):
            status, _ = h.request(
                host, port, "POST", "/api/v1/ingest/batch", token=db.token, body=body
            )
            statuses.append(status)

    _, cpu = run_clients(db, [threading.Thread(target=post_all) for _ in range(args.agents)])
    assert set(statuses) == {400}, set(statuses)
    return {
        "requests": len(statuses),
        **{f"{part}_cpu_ms": 1000 * seconds / len(statuses) for part, seconds in cpu.items()},
    }


def run_clients(db: h.Database, threads: list[threading.Thread]) -> tuple[float, dict[str, float]]:
    """Runs the posting threads to the end: (wall seconds, CPU seconds used meanwhile by the
    server, the clients (this process) and the database)."""
    before = (db.server_cpu_s(), time.process_time(), db.database_cpu_s())
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    after = (db.server_cpu_s(), time.process_time(), db.database_cpu_s())
    used = (end - start for end, start in zip(after, before, strict=True))
    return wall, dict(zip(("server", "client", "database"), used, strict=True))


def samples_per_batch(rounds: list[dict[str, Any]]) -> float:
    return h.median([r["http"]["samples"] / r["http"]["batches"] for r in rounds])


def packed(body: dict[str, Any]) -> dict[str, Any]:
    """The batch with its arrays packed, as the agent's sender packs its lists."""
    from perfweb_contract.protocol import pack_batch_arrays

    lists = orjson.loads(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY))
    pack_batch_arrays(lists)
    return lists


def raw_round(db: h.Database, args: argparse.Namespace, round_no: int) -> dict[str, Any]:
    from django.db import transaction

    from perfweb.series.services import chunks_insert, chunks_prepare

    work = [(ids, samples_of(body)) for ids, body in raw_batches(args, round_no)]
    samples = sum(len(s.t) for _, batch in work for s in batch)
    cpu_before = time.process_time(), db.database_cpu_s()
    began = time.perf_counter()
    rows = [
        (ids[c.device, c.name], *c.columns)
        for ids, batch in work
        for c in chunks_prepare(samples=batch)
    ]
    packed = time.perf_counter()
    with transaction.atomic():
        chunks_insert(rows=rows)
    loaded = time.perf_counter()
    cpu = time.process_time() - cpu_before[0] + db.database_cpu_s() - cpu_before[1]
    return {
        "round": round_no,
        "samples": samples,
        "rows": len(rows),
        "pack_s": packed - began,
        "load_s": loaded - packed,
        "load_samples_per_s": samples / (loaded - packed),
        "pack_and_load_samples_per_s": samples / (loaded - began),
        "samples_per_cpu_s": samples / cpu,
    }


def raw_batches(
    args: argparse.Namespace, round_no: int
) -> list[tuple[dict[tuple[str, str], int], dict[str, Any]]]:
    """The round's batch bodies for the raw load, each with its run's series ids (a run per
    agent, its series created up front as the endpoint's first batch would)."""
    from perfweb.projects.models import Project
    from perfweb.runs.models import Run
    from perfweb.series.services import series_ids

    project = Project.objects.get(name="bench")
    out = []
    for i in range(args.agents):
        agent = AgentStream(hz=args.hz, batch_seconds=args.batch_seconds, seed=round_no * 1000 + i)
        run = Run.objects.create(
            project=project,
            run_id=f"raw{agent.run_id}"[:64],
            started_at=_now(),
            last_seen_at=_now(),
        )
        bodies = [agent.next_batch()[0] for _ in range(args.batches)]
        ids = series_ids(run=run, keys={(s.device, s.name) for s in samples_of(bodies[0])})
        out += [(ids, body) for body in bodies]
    return out


def samples_of(body: dict[str, Any]) -> list[Any]:
    """A batch body's series as the endpoint's parser hands them on (float64 arrays)."""
    from perfweb.runs.samples import Samples

    def array(values: Any) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    steps = body["steps"]
    return [
        *(Samples(m["device"], m["name"], array(m["t"]), array(m["v"])) for m in body["metrics"]),
        Samples("rank:0", "step.duration", array(steps["t"]), array(steps["duration"])),
        Samples("rank:0", "step.data_wait", array(steps["t"]), array(steps["data_wait"])),
    ]


ROW_TABLE = "bench_sample_row"


def row_per_sample_load(db: h.Database, args: argparse.Namespace) -> dict[str, Any]:
    """The conventional layout for comparison: one row per sample (series, t, v) with an
    index on (series, t), a round's worth of samples bulk-loaded the same way."""
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        key = "bigserial" if db.kind == "postgresql" else "integer"
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {ROW_TABLE} (id {key} PRIMARY KEY,"
            " series_id bigint NOT NULL, t double precision NOT NULL, v double precision NOT NULL)"
        )
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {ROW_TABLE}_st ON {ROW_TABLE} (series_id, t)")
    pieces = [
        (ids[s.device, s.name], s.t, s.v)
        for ids, body in raw_batches(args, args.rounds)
        for s in samples_of(body)
    ]
    samples = sum(len(t) for _, t, _ in pieces)
    began = time.perf_counter()
    rows = [
        (series_id, ti, vi)
        for series_id, t, v in pieces
        for ti, vi in zip(t.tolist(), v.tolist(), strict=True)
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        if db.kind == "postgresql":
            command = f"COPY {ROW_TABLE} (series_id, t, v) FROM STDIN (FORMAT BINARY)"
            with cursor.cursor.copy(command) as copy:
                copy.set_types(["int8", "float8", "float8"])
                for row in rows:
                    copy.write_row(row)
        else:
            cursor.executemany(
                f"INSERT INTO {ROW_TABLE} (series_id, t, v) VALUES (%s, %s, %s)", rows
            )
    wall = time.perf_counter() - began
    db.vacuum_analyze((ROW_TABLE,))
    stored = db.storage_bytes((ROW_TABLE,))
    return {
        "samples_per_s": samples / wall,
        "bytes_per_sample": stored / samples,
        "orm_samples_per_s": orm_per_sample_load(pieces[: len(pieces) // 4]),
    }


def orm_per_sample_load(pieces: list[tuple[int, np.ndarray, np.ndarray]]) -> float:
    """Samples/s of one ORM object per sample into the row table, saved with bulk_create in
    one transaction (the ORM's fastest way)."""
    from django.db import models, transaction

    class SampleRow(models.Model):
        series_id = models.BigIntegerField()
        t = models.FloatField()
        v = models.FloatField()

        class Meta:
            app_label = "series"
            db_table = ROW_TABLE
            managed = False

    samples = sum(len(t) for _, t, _ in pieces)
    began = time.perf_counter()
    objects = [
        SampleRow(series_id=series_id, t=ti, v=vi)
        for series_id, t, v in pieces
        for ti, vi in zip(t.tolist(), v.tolist(), strict=True)
    ]
    with transaction.atomic():
        SampleRow.objects.bulk_create(objects, batch_size=5000)
    return samples / (time.perf_counter() - began)


def _stored_samples() -> int:
    from django.db.models import Sum

    from perfweb.series.models import Chunk

    return int(Chunk.objects.aggregate(total=Sum("count"))["total"] or 0)


def compact_all() -> float:
    from perfweb.runs.models import Run
    from perfweb.series.services import run_compact

    began = time.perf_counter()
    for pk in Run.objects.values_list("id", flat=True):
        run_compact(run_id=pk)
    return time.perf_counter() - began


def _vacuum_full(db: h.Database) -> None:
    import psycopg

    # Compaction deletes the small chunks; plain VACUUM would let PostgreSQL reuse their
    # space for the next ones (the steady state), VACUUM FULL shows what the live data takes.
    with psycopg.connect(db.url, autocommit=True) as connection:
        for table in TABLES:
            connection.execute(f"vacuum full analyze {table}")


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


if __name__ == "__main__":
    main()
