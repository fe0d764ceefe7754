"""50 agents posting at once: no 5xx, and what is stored equals what was sent, exactly.

    python bench/concurrency.py                      # SQLite and PostgreSQL, 60 s each
    python bench/concurrency.py --db sqlite --duration 20 --agents 50

Each agent is one run posting batches back to back (8 GPUs × 12 metrics × 5 s at 1 Hz plus
steps — the agent's default batch) to gunicorn on 127.0.0.1, from `--processes` client
processes. Like the real agent, a batch whose answer never came (timeout, reset, 5xx) is sent
again with the same seq; and `--resend-share` of the acknowledged batches are sent a second
time on purpose, as if the reply had been lost. At the end every run's stored sample count
(read API) is compared with the samples of the distinct batches sent. Writes
bench/results/concurrency-<db>.json.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import server_harness as h
from workload import AgentStream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of posting")
    parser.add_argument("--processes", type=int, default=5, help="client processes")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--resend-share", type=float, default=0.05)
    args = parser.parse_args()
    if args.db == "both":
        for kind in ("sqlite", "postgresql"):
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--db", kind], check=True)
        return
    run(args)


def run(args: argparse.Namespace) -> None:
    with h.database(args.db) as db, h.server(db, workers=args.workers) as (host, port):
        groups = [list(range(i, args.agents, args.processes)) for i in range(args.processes)]
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            began = time.perf_counter()
            reports = pool.starmap(
                client,
                [
                    (host, port, db.token, group, args.duration, args.resend_share)
                    for group in groups
                ],
            )
            wall = time.perf_counter() - began
        agents = [agent for report in reports for agent in report]
        mismatches = []
        stored_total = 0
        for agent in agents:
            status, answer = h.request(
                host, port, "GET", f"/api/v1/runs/{agent['run_id']}", token=db.token
            )
            assert status == 200, status
            stored = sum(s["count"] for s in answer["series"])
            stored_total += stored
            if stored != agent["sent_samples"]:
                mismatches.append(
                    {"run": agent["run_id"], "sent": agent["sent_samples"], "stored": stored}
                )
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    for agent in agents:
        statuses.update(agent["statuses"])
        latencies.extend(agent["latencies"])
    sent_total = sum(a["sent_samples"] for a in agents)
    server_errors = sum(n for code, n in statuses.items() if code.startswith("5"))
    result = {
        "db": args.db,
        "config": vars(args),
        "wall_s": wall,
        "agents": len(agents),
        "requests": sum(statuses.values()),
        "statuses": dict(statuses),
        "server_errors": server_errors,
        "batches_acknowledged": sum(a["batches"] for a in agents),
        "duplicates_acknowledged": sum(a["duplicates"] for a in agents),
        "resent_on_purpose": sum(a["resent"] for a in agents),
        "sent_samples": sent_total,
        "stored_samples": stored_total,
        "exact": not mismatches and sent_total == stored_total,
        "mismatches": mismatches[:20],
        "samples_per_s": sent_total / wall,
        "latency_ms_p50": 1000 * h.median(latencies),
        "latency_ms_p95": 1000 * h.percentile(latencies, 95),
        "latency_ms_max": 1000 * max(latencies),
    }
    path = h.write_result(f"concurrency-{args.db}", result)
    print(
        f"[{args.db}] {len(agents)} agents, {wall:.0f} s: {result['requests']:,} requests "
        f"{dict(statuses)}, {server_errors} server errors"
    )
    print(
        f"[{args.db}] sent {sent_total:,} samples in {result['batches_acknowledged']:,} batches "
        f"(+{result['resent_on_purpose']} resent, {result['duplicates_acknowledged']} answered "
        f"duplicate); stored {stored_total:,}: {'EXACT' if result['exact'] else 'MISMATCH'}"
    )
    print(
        f"[{args.db}] {result['samples_per_s']:,.0f} samples/s; latency p50 "
        f"{result['latency_ms_p50']:.0f} ms, p95 {result['latency_ms_p95']:.0f} ms, "
        f"max {result['latency_ms_max']:.0f} ms; wrote {path}"
    )
    if not result["exact"] or server_errors:
        sys.exit(1)


def client(
    host: str, port: int, token: str, group: list[int], duration: float, resend_share: float
) -> list[dict[str, Any]]:
    """One client process: a thread per agent, until the deadline."""
    deadline = time.monotonic() + duration
    reports: list[dict[str, Any]] = []
    threads = [
        threading.Thread(
            target=agent_loop, args=(host, port, token, index, deadline, resend_share, reports)
        )
        for index in group
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return reports


def agent_loop(
    host: str,
    port: int,
    token: str,
    index: int,
    deadline: float,
    resend_share: float,
    reports: list[dict[str, Any]],
) -> None:
    stream = AgentStream(hz=1.0, batch_seconds=5.0, seed=index)
    rng = random.Random(index)
    report: dict[str, Any] = {
        "run_id": stream.run_id,
        "statuses": Counter(),
        "latencies": [],
        "sent_samples": 0,
        "batches": 0,
        "duplicates": 0,
        "resent": 0,
    }

    def post(path: str, body: bytes) -> dict[str, Any]:
        """Until a 200 comes back, as the agent's sender does (same body, same seq)."""
        for attempt in range(50):
            began = time.perf_counter()
            try:
                status, answer = h.request(
                    host, port, "POST", path, token=token, body=body, gzipped=True, timeout=60
                )
            except OSError:
                status, answer = 0, None
            report["latencies"].append(time.perf_counter() - began)
            report["statuses"][str(status)] += 1
            if status == 200:
                return answer
            time.sleep(min(2.0, 0.05 * 2**attempt))
        raise RuntimeError(f"{path} failed 50 times")

    post("/api/v1/ingest/start", h.gz(stream.start_body()))
    while time.monotonic() < deadline:
        body, samples = stream.next_batch()
        payload = h.gz(body)
        # Acknowledged once at least (a retry after a lost reply may say "duplicate": the
        # first attempt stored it): each distinct batch counts once.
        answer = post("/api/v1/ingest/batch", payload)
        report["sent_samples"] += samples  # metrics and step series, as stored
        report["batches"] += 1
        report["duplicates"] += bool(answer["duplicate"])
        if rng.random() < resend_share:
            report["resent"] += 1
            assert post("/api/v1/ingest/batch", payload)["duplicate"] is True
            report["duplicates"] += 1
    post(
        "/api/v1/ingest/finish",
        h.gz({"run_id": stream.run_id, "agent_id": stream.agent_id, "exit_code": 0, "final": True}),
    )
    report["statuses"] = dict(report["statuses"])
    reports.append(report)


if __name__ == "__main__":
    main()
