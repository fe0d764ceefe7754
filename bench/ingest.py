"""Ingest throughput through the real HTTP endpoint vs a raw bulk load of the same rows, and
the bytes stored per sample.

    python bench/ingest.py                      # SQLite and PostgreSQL, 3 rounds each
    python bench/ingest.py --db sqlite --rounds 1 --batches 10

HTTP: gunicorn on 127.0.0.1, `--agents` concurrent clients (one run each) posting gzipped
batches of 8 GPUs × 12 metrics at `--hz` for `--batch-seconds`, plus process metrics and
steps. Raw: the same samples turned into the same chunk rows and loaded into the same table
(same indexes) in one transaction — COPY on PostgreSQL, executemany on SQLite; reported with
and without the packing time. Bytes: the chunk and series tables with their indexes (and
TOAST), as ingested and after compaction, per sample. Writes bench/results/ingest-<db>.json.
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
import server_harness as h
from workload import AgentStream

TABLES = ("series_chunk", "series_series")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--agents", type=int, default=8, help="concurrent posting clients")
    parser.add_argument("--batches", type=int, default=30, help="batches per agent per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
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
        with h.server(db, workers=args.workers) as (host, port):
            http_rounds = [http_round(db, host, port, args, r) for r in range(args.rounds)]
        http_samples = sum(r["samples"] for r in http_rounds)
        db.vacuum_analyze(TABLES)
        ingested = db.storage_bytes(TABLES)
        compact_s = compact_all()
        if db.kind == "postgresql":
            _vacuum_full(db)
        compacted = db.storage_bytes(TABLES)
        raw_rounds = [raw_round(db, args, r) for r in range(args.rounds)]
    http_rate = h.median([r["samples_per_s"] for r in http_rounds])
    copy_rate = h.median([r["load_samples_per_s"] for r in raw_rounds])
    full_rate = h.median([r["pack_and_load_samples_per_s"] for r in raw_rounds])
    row_rate = h.median([r["row_per_sample"]["samples_per_s"] for r in raw_rounds])
    row_bytes = raw_rounds[-1]["row_per_sample"]["bytes_per_sample"]
    http_per_cpu = h.median([r["samples_per_cpu_s"] for r in http_rounds])
    raw_per_cpu = h.median([r["samples_per_cpu_s"] for r in raw_rounds])
    result = {
        "db": args.db,
        "config": vars(args),
        "http": http_rounds,
        "raw": raw_rounds,
        "http_samples_per_s_median": http_rate,
        "raw_load_samples_per_s_median": copy_rate,
        "raw_pack_and_load_samples_per_s_median": full_rate,
        "ratio_http_vs_raw_load": http_rate / copy_rate,
        "ratio_http_vs_raw_pack_and_load": http_rate / full_rate,
        "http_samples_per_cpu_s_median": http_per_cpu,
        "raw_samples_per_cpu_s_median": raw_per_cpu,
        "ratio_http_vs_raw_per_cpu_second": http_per_cpu / raw_per_cpu,
        "row_per_sample_load_samples_per_s_median": row_rate,
        "row_per_sample_bytes_per_sample": row_bytes,
        "ratio_http_vs_row_per_sample_load": http_rate / row_rate,
        "samples_stored": http_samples,
        "bytes_per_sample_as_ingested": ingested / http_samples,
        "bytes_per_sample_after_compaction": compacted / http_samples,
        "compaction_samples_per_s": http_samples / compact_s,
    }
    path = h.write_result(f"ingest-{args.db}", result)
    print(
        f"[{args.db}] HTTP ingest median {http_rate:,.0f} samples/s "
        f"(p95 batch latency {h.median([r['p95_latency_ms'] for r in http_rounds]):.0f} ms)"
    )
    print(
        f"[{args.db}] raw load {copy_rate:,.0f} samples/s (rows prebuilt), "
        f"{full_rate:,.0f} samples/s (packing included)"
    )
    print(
        f"[{args.db}] ratio HTTP/raw: {http_rate / copy_rate:.2f} (vs load only), "
        f"{http_rate / full_rate:.2f} (vs pack+load); goal >= 0.5"
    )
    print(
        f"[{args.db}] bytes/sample incl. indexes: {ingested / http_samples:.2f} as ingested, "
        f"{compacted / http_samples:.2f} after compaction (goal <= 16); "
        f"compaction {http_samples / compact_s:,.0f} samples/s"
    )
    busy = h.median([r["cores_busy"] for r in http_rounds])
    print(
        f"[{args.db}] per CPU-second of server + client + database processes: HTTP "
        f"{http_per_cpu:,.0f}, raw {raw_per_cpu:,.0f} samples, "
        f"ratio {http_per_cpu / raw_per_cpu:.2f};"
        f" HTTP kept {busy:.2f} of {os.cpu_count()} cores busy (load avg {os.getloadavg()[0]:.1f})"
    )
    print(
        f"[{args.db}] a row per sample instead: raw load {row_rate:,.0f} samples/s, "
        f"{row_bytes:.0f} bytes/sample; HTTP/that {http_rate / row_rate:.2f}"
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
    cpu_before = (db.server_cpu_s(), time.process_time(), db.database_cpu_s())
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    cpu_after = (db.server_cpu_s(), time.process_time(), db.database_cpu_s())
    server_cpu, client_cpu, database_cpu = (
        after - before for after, before in zip(cpu_after, cpu_before, strict=True)
    )
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


def raw_round(db: h.Database, args: argparse.Namespace, round_no: int) -> dict[str, Any]:
    from django.db import connection, transaction

    from perfweb.projects.models import Project
    from perfweb.runs.models import Run
    from perfweb.series.models import Series
    from perfweb.series.services import series_ids

    agents = [
        AgentStream(hz=args.hz, batch_seconds=args.batch_seconds, seed=round_no * 1000 + i)
        for i in range(args.agents)
    ]
    bodies = [[a.next_batch()[0] for _ in range(args.batches)] for a in agents]
    project = Project.objects.get(name="bench")
    pieces = []  # (series_id, t, v) exactly as the endpoint would store them
    for agent, batches in zip(agents, bodies, strict=True):
        run = Run.objects.create(
            project=project,
            run_id=f"raw{agent.run_id}"[:64],
            started_at=_now(),
            last_seen_at=_now(),
        )
        keys = {(m["device"], m["name"]) for m in batches[0]["metrics"]}
        keys |= {("rank:0", "step.duration"), ("rank:0", "step.data_wait")}
        ids = series_ids(run=run, keys=keys)
        for body in batches:
            for m in body["metrics"]:
                pieces.append(
                    (
                        ids[m["device"], m["name"]],
                        np.asarray(m["t"], np.float64),
                        np.asarray(m["v"], np.float64),
                    )
                )
            steps = body["steps"]
            for name, values in (
                ("step.duration", steps["duration"]),
                ("step.data_wait", steps["data_wait"]),
            ):
                pieces.append((ids["rank:0", name], steps["t"], values))
    samples = sum(len(t) for _, t, _ in pieces)
    cpu_before = time.process_time(), db.database_cpu_s()
    began = time.perf_counter()
    rows = [chunk_row(series_id, t, v) for series_id, t, v in pieces]
    packed = time.perf_counter()
    columns = (
        "series_id",
        "t_min",
        "t_max",
        "count",
        "v_sum",
        "v_min",
        "v_max",
        "t_at_min",
        "t_at_max",
        "data",
        "rollup_fine",
        "rollup_coarse",
    )
    with transaction.atomic(), connection.cursor() as cursor:
        if db.kind == "postgresql":
            with cursor.cursor.copy(f"COPY series_chunk ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            cursor.executemany(
                f"INSERT INTO series_chunk ({', '.join(columns)}) VALUES "
                f"({', '.join('%s' for _ in columns)})",
                rows,
            )
    loaded = time.perf_counter()
    cpu = time.process_time() - cpu_before[0] + db.database_cpu_s() - cpu_before[1]
    assert Series.objects.filter(run__run_id__startswith="raw").exists()
    return {
        "round": round_no,
        "samples": samples,
        "rows": len(rows),
        "pack_s": packed - began,
        "load_s": loaded - packed,
        "load_samples_per_s": samples / (loaded - packed),
        "pack_and_load_samples_per_s": samples / (loaded - began),
        "samples_per_cpu_s": samples / cpu,
        "row_per_sample": row_per_sample_load(db, pieces),
    }


ROW_TABLE = "bench_sample_row"


def row_per_sample_load(db: h.Database, pieces: list[Any]) -> dict[str, Any]:
    """The conventional layout for comparison: one row per sample (series, t, v) with an
    index on (series, t), the same samples bulk-loaded the same way."""
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        key = "bigserial" if db.kind == "postgresql" else "integer"
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {ROW_TABLE} (id {key} PRIMARY KEY,"
            " series_id bigint NOT NULL, t double precision NOT NULL, v double precision NOT NULL)"
        )
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {ROW_TABLE}_st ON {ROW_TABLE} (series_id, t)")
    samples = sum(len(t) for _, t, _ in pieces)
    began = time.perf_counter()
    rows = [
        (series_id, ti, vi)
        for series_id, t, v in pieces
        for ti, vi in zip(np.asarray(t).tolist(), np.asarray(v).tolist(), strict=True)
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
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {ROW_TABLE}")
        total = cursor.fetchone()[0]
    return {
        "samples_per_s": samples / wall,
        "bytes_per_sample": db.storage_bytes((ROW_TABLE,)) / total,
    }


def chunk_row(series_id: int, t: np.ndarray, v: np.ndarray) -> tuple[Any, ...]:
    from perfweb.series import codec

    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    at_min, at_max = int(v.argmin()), int(v.argmax())
    return (
        series_id,
        float(t[0]),
        float(t[-1]),
        len(t),
        float(v.sum()),
        float(v[at_min]),
        float(v[at_max]),
        float(t[at_min]),
        float(t[at_max]),
        codec.encode_plain(t=t, v=v),
        None,
        None,
    )


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
