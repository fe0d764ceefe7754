"""Timeline reads: a 10,000,000-sample series downsampled to 2,000 points, and a whole run's
timeline (8 GPUs × 12 metrics × 24 h at 1 Hz), through the real HTTP read API.

    python bench/timeline.py                 # SQLite and PostgreSQL
    python bench/timeline.py --db sqlite --requests 10

The data is written straight through the storage service (packed chunks, as compaction
leaves them); reads go through gunicorn on 127.0.0.1. Server time is the view's own time
(the Server-Timing header: auth, queries, decoding, MinMaxLTTB, JSON); wall time adds HTTP.
"Everything" is the same read with no downsampling (every sample decoded and serialised),
timed in-process. Goals: ≤ 50 ms server time for the 10M series, ≤ 300 ms p95 for the
timeline. Writes bench/results/timeline-<db>.json.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from typing import Any

import numpy as np
import orjson
import server_harness as h
from workload import GPU_METRICS, gpu_values

T0 = 1764496800.0
LONG_SAMPLES = 10_000_000
DAY = 86_400


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per case")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.db == "both":
        for kind in ("sqlite", "postgresql"):
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--db", kind], check=True)
        return
    run(args)


def run(args: argparse.Namespace) -> None:
    with h.database(args.db) as db:
        h.setup_django(db)
        began = time.perf_counter()
        long_run = load_long_series()
        day_run = load_day_of_gpus()
        load_s = time.perf_counter() - began
        db.vacuum_analyze(("series_chunk", "series_series"))
        with h.server(db, workers=args.workers) as (host, port):
            cases = {
                "long_series_2000_points": [
                    f"/api/v1/runs/{long_run}/series?name=gpu.utilization&device=gpu:0&points=2000"
                ],
                "long_series_zoom_2000_points": zooms(long_run, args.requests),
                "day_timeline_1000_points": [f"/api/v1/runs/{day_run}/timeline?points=1000"],
            }
            results = {
                name: timed(db, host, port, paths, args.requests) for name, paths in cases.items()
            }
        everything = {
            "long_series_all_points_ms": read_everything(long_run, names=["gpu.utilization"]),
            "day_timeline_all_points_ms": read_everything(day_run, names=None),
        }
    long, day = results["long_series_2000_points"], results["day_timeline_1000_points"]
    result = {
        "db": args.db,
        "load_s": load_s,
        "cases": results,
        **everything,
        "ratio_long_all_vs_downsampled": everything["long_series_all_points_ms"]
        / long["server_ms_median"],
        "ratio_day_all_vs_downsampled": everything["day_timeline_all_points_ms"]
        / day["server_ms_median"],
    }
    path = h.write_result(f"timeline-{args.db}", result)
    for name, case in results.items():
        print(
            f"[{args.db}] {name}: server median {case['server_ms_median']:.1f} ms, "
            f"p95 {case['server_ms_p95']:.1f} ms; wall median {case['wall_ms_median']:.1f} ms, "
            f"p95 {case['wall_ms_p95']:.1f} ms; {case['points']} points, "
            f"{case['response_bytes']:,} bytes"
        )
    print(
        f"[{args.db}] all points instead: 10M series {everything['long_series_all_points_ms']:,.0f}"
        f" ms ({result['ratio_long_all_vs_downsampled']:.0f}x), day timeline "
        f"{everything['day_timeline_all_points_ms']:,.0f} ms "
        f"({result['ratio_day_all_vs_downsampled']:.0f}x)"
    )
    print(f"[{args.db}] goals: 10M series <= 50 ms server, timeline p95 <= 300 ms; wrote {path}")


def timed(db: h.Database, host: str, port: int, paths: list[str], requests: int) -> dict[str, Any]:
    server, wall = [], []
    points = size = 0
    for i in range(requests + 2):
        status, body, server_ms, wall_ms = h.get_timed(
            host, port, paths[i % len(paths)], token=db.token
        )
        assert status == 200, body[:300]
        if i < 2:
            continue  # warm-up: connection pools, caches
        server.append(server_ms)
        wall.append(wall_ms)
        answer = orjson.loads(body)
        points = max(points, sum(len(s["t"]) for s in answer["series"]))
        size = max(size, len(body))
    return {
        "requests": requests,
        "server_ms_median": h.median(server),
        "server_ms_p95": h.percentile(server, 95),
        "wall_ms_median": h.median(wall),
        "wall_ms_p95": h.percentile(wall, 95),
        "points": points,
        "response_bytes": size,
    }


def zooms(run_id: str, count: int) -> list[str]:
    rng = random.Random(7)
    paths = []
    for _ in range(count):
        width = rng.choice([3600, 86_400, 7 * 86_400, 30 * 86_400])
        start = T0 + rng.uniform(0, LONG_SAMPLES - width)
        paths.append(
            f"/api/v1/runs/{run_id}/series?name=gpu.utilization&device=gpu:0"
            f"&points=2000&start={start:.3f}&end={start + width:.3f}"
        )
    return paths


def new_run(run_id: str) -> Any:
    from django.utils import timezone

    from perfweb.projects.models import Project
    from perfweb.runs.models import Run

    return Run.objects.create(
        project=Project.objects.get(name="bench"),
        run_id=run_id,
        started_at=timezone.now(),
        last_seen_at=timezone.now(),
    )


def store(run: Any, device: str, name: str, t: np.ndarray, v: np.ndarray) -> None:
    """Packed chunks, as compaction would leave them."""
    from perfweb.series import codec
    from perfweb.series.services import chunk_columns, chunks_insert, series_ids

    series_id = series_ids(run=run, keys={(device, name)})[device, name]
    step = codec.CHUNK_SAMPLES
    for begin in range(0, len(t), 100 * step):
        rows = [
            (series_id, *chunk_columns(t=t[i : i + step], v=v[i : i + step], packed=True))
            for i in range(begin, min(len(t), begin + 100 * step), step)
        ]
        chunks_insert(rows=rows)


def load_long_series() -> str:
    rng = np.random.default_rng(1)
    run = new_run("bench-long-series")
    t = T0 + np.arange(LONG_SAMPLES, dtype=np.float64) + rng.normal(0, 1e-3, LONG_SAMPLES)
    store(run, "gpu:0", "gpu.utilization", t, gpu_values(rng, "gpu.utilization", LONG_SAMPLES))
    return run.run_id


def load_day_of_gpus() -> str:
    rng = np.random.default_rng(2)
    run = new_run("bench-day-of-8-gpus")
    for gpu in range(8):
        t = T0 + np.arange(DAY, dtype=np.float64) + rng.normal(0, 1e-3, DAY)
        for name in GPU_METRICS:
            store(run, f"gpu:{gpu}", name, t, gpu_values(rng, name, DAY))
    return run.run_id


def read_everything(run_id: str, *, names: list[str] | None) -> float:
    """Every sample, decoded and serialised as the API would (in-process: no HTTP)."""
    from perfweb.runs.models import Run
    from perfweb.series.selectors import series_read

    run = Run.objects.get(run_id=run_id)
    began = time.perf_counter()
    series = series_read(run=run, names=names, points=10**9)
    orjson.dumps({"series": [s.as_json() for s in series]}, option=orjson.OPT_SERIALIZE_NUMPY)
    return 1000 * (time.perf_counter() - began)


if __name__ == "__main__":
    main()
