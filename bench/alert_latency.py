"""Alert timeliness: from the moment a rule's condition holds to the webhook's receipt.

    python bench/alert_latency.py [--runs 200] [--trials 40] [--interval 30]

Starts the real stack (tests/alerts/stack.py: the ingest API under runserver, a Celery worker
and beat on the local Redis, a temporary SQLite database, or --database-url for PostgreSQL),
keeps `--runs` runs streaming busy GPUs through the ingest API (2 GPUs, 1 Hz, a batch every
10 s with 5 minutes of history, steps included), and every few seconds starts one more run
whose first batch carries 5 minutes of idle GPU samples. The default rule (utilisation below
30% for 5 minutes) holds from the moment that batch is stored; the latency is the time from
just before that batch is sent to the loopback webhook receiver getting the firing message.
Goal: p95 ≤ the evaluation interval + 5 s. Prints the figures as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.alerts.receiver import Receiver  # noqa: E402
from tests.alerts.stack import Stack, redis_available  # noqa: E402

GPUS = 2
HISTORY_S = 300
BATCH_EVERY_S = 10.0


def start_body(run_id: str, *, started_at: float, name: str) -> dict[str, object]:
    return {
        "run_id": run_id,
        "agent_id": run_id,
        "name": name,
        "role": "launcher",
        "command": ["python", "train.py"],
        "cwd": "/tmp",
        "host": "bench-node",
        "pid": 1,
        "rank": None,
        "local_rank": None,
        "world_size": None,
        "started_at": started_at,
        "tags": {},
        "facts": {},
        "devices": [{"key": f"gpu:{i}", "kind": "gpu", "index": i} for i in range(GPUS)],
    }


def batch_body(
    run_id: str, *, seq: int, start: float, end: float, utilization: float, first_step: int
) -> dict[str, object]:
    t = [start + i for i in range(int(end - start))]
    metrics = []
    for gpu in range(GPUS):
        metrics += [
            {
                "device": f"gpu:{gpu}",
                "name": "gpu.utilization",
                "t": t,
                "v": [utilization + random.random() for _ in t],
            },
            {"device": f"gpu:{gpu}", "name": "gpu.memory_used", "t": t, "v": [3.0e10] * len(t)},
        ]
    steps = {
        "rank": 0,
        "index": list(range(first_step, first_step + len(t))),
        "t": t,
        "duration": [0.5] * len(t),
        "data_wait": [0.01] * len(t),
    }
    return {
        "run_id": run_id,
        "agent_id": run_id,
        "seq": seq,
        "sent_at": end,
        "metrics": metrics,
        "steps": steps,
        "dropped": 0,
    }


class Background:
    """`runs` busy runs, each sending a batch every BATCH_EVERY_S seconds."""

    def __init__(self, stack: Stack, token: str, runs: int) -> None:
        self.stack, self.token = stack, token
        self.run_ids = [f"busy-{uuid.uuid4().hex}" for _ in range(runs)]
        self.seq = dict.fromkeys(self.run_ids, 0)
        self.sent_until: dict[str, float] = {}
        self.halt = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=8)
        self.errors = 0

    def begin(self) -> None:
        now = time.time()
        list(self.pool.map(self._start, self.run_ids, [now] * len(self.run_ids)))
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _start(self, run_id: str, now: float) -> None:
        self.stack.post(
            "/api/v1/ingest/start",
            self.token,
            start_body(run_id, started_at=now - HISTORY_S, name=run_id[:12]),
        )
        self._send(run_id, start=now - HISTORY_S, end=now)

    def _send(self, run_id: str, *, start: float, end: float) -> None:
        seq = self.seq[run_id]
        self.seq[run_id] += 1
        try:
            self.stack.post(
                "/api/v1/ingest/batch",
                self.token,
                batch_body(
                    run_id,
                    seq=seq,
                    start=start,
                    end=end,
                    utilization=85.0,
                    first_step=int(start) % 1_000_000,
                ),
            )
            self.sent_until[run_id] = end
        except OSError:
            self.errors += 1

    def _loop(self) -> None:
        spread = BATCH_EVERY_S / len(self.run_ids)
        while not self.halt.is_set():
            for run_id in self.run_ids:
                if self.halt.wait(spread):
                    return
                now = time.time()
                self.pool.submit(self._send, run_id, start=self.sent_until[run_id], end=now)


def trial(stack: Stack, token: str, receiver_seen: dict[str, float], timeout: float) -> float:
    run_id = f"idle-{uuid.uuid4().hex}"
    now = time.time()
    stack.post(
        "/api/v1/ingest/start", token, start_body(run_id, started_at=now - HISTORY_S, name="idle")
    )
    holds_at = time.time()  # just before the batch that makes the condition true is sent
    stack.post(
        "/api/v1/ingest/batch",
        token,
        batch_body(
            run_id, seq=0, start=holds_at - HISTORY_S, end=holds_at, utilization=3.0, first_step=0
        ),
    )
    deadline = time.monotonic() + timeout
    seq = 1
    while time.monotonic() < deadline and run_id not in receiver_seen:
        time.sleep(1.0)
        if time.time() - holds_at >= 5 * seq:  # keep the idle run alive like an agent would
            end = time.time()
            stack.post(
                "/api/v1/ingest/batch",
                token,
                batch_body(
                    run_id, seq=seq, start=end - 5, end=end, utilization=3.0, first_step=seq * 10
                ),
            )
            seq += 1
    stack.post(
        "/api/v1/ingest/finish",
        token,
        {
            "run_id": run_id,
            "agent_id": run_id,
            "ended_at": time.time(),
            "exit_code": 0,
            "final": True,
        },
    )
    if run_id not in receiver_seen:
        return float("nan")
    return receiver_seen[run_id] - holds_at


def tick_durations(stack: Stack) -> list[float]:
    log = (stack.dir / "worker.log").read_text(errors="replace")
    return [
        float(s) for s in re.findall(r"alerts_tick_task\[[^\]]+\] succeeded in ([0-9.]+)s", log)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--trial-every", type=float, default=3.0)
    parser.add_argument(
        "--database-url",
        default="",
        help="an empty PostgreSQL database instead of a temporary SQLite file",
    )
    args = parser.parse_args()
    if not redis_available():
        sys.exit("Redis is not answering on 127.0.0.1:6379")

    stack = Stack(interval_s=args.interval, claim_s=60, worker_concurrency=2)
    stack.worker_loglevel = "INFO"
    if args.database_url:
        stack.env["DATABASE_URL"] = args.database_url
    seen: dict[str, float] = {}
    with Receiver() as receiver:
        stack.start()
        try:
            token = stack.bootstrap("bench")
            stack.shell(f"""
from perfweb.alerts.models import AlertRule, Channel
from perfweb.projects.models import Project
p = Project.objects.get(name="bench")
Channel.objects.create(project=p, kind="webhook", name="bench", config={{"url": {receiver.url!r}}})
""")
            background = Background(stack, token, args.runs)
            t0 = time.monotonic()
            background.begin()
            print(f"{args.runs} busy runs started in {time.monotonic() - t0:.1f} s", flush=True)

            def watch() -> None:
                while True:
                    for record in list(receiver.got):
                        body = record.body
                        if body.get("event") == "firing" and body["run"]["id"] not in seen:
                            seen[body["run"]["id"]] = record.at
                    time.sleep(0.02)

            threading.Thread(target=watch, daemon=True).start()
            time.sleep(min(args.interval, 10))  # let the first ticks see the busy runs
            with ThreadPoolExecutor(max_workers=args.trials) as pool:
                futures = []
                for _ in range(args.trials):
                    futures.append(pool.submit(trial, stack, token, seen, args.interval * 3 + 30))
                    time.sleep(args.trial_every)
                latencies = [f.result() for f in futures]
            background.halt.set()
            false_alarms = [
                b for b in receiver.bodies("firing") if b["run"]["id"].startswith("busy-")
            ]
        finally:
            stack.stop()
    ok = sorted(x for x in latencies if x == x)
    ticks = tick_durations(stack)
    stack.cleanup()
    figures = {
        "runs": args.runs,
        "interval_s": args.interval,
        "trials": len(latencies),
        "delivered": len(ok),
        "missed": len(latencies) - len(ok),
        "p50_s": round(statistics.median(ok), 2) if ok else None,
        "p95_s": round(ok[min(len(ok) - 1, int(0.95 * len(ok)))], 2) if ok else None,
        "max_s": round(ok[-1], 2) if ok else None,
        "goal_p95_s": args.interval + 5,
        "tick_p50_s": round(statistics.median(ticks), 3) if ticks else None,
        "tick_max_s": round(max(ticks), 3) if ticks else None,
        "false_alarms_on_busy_runs": len(false_alarms),
        "ingest_errors": background.errors,
        "database": "postgresql" if args.database_url else "sqlite",
    }
    figures["pass"] = (
        bool(ok) and figures["p95_s"] <= figures["goal_p95_s"] and not figures["missed"]
    )
    print(json.dumps(figures), flush=True)
    os._exit(0 if figures["pass"] else 1)


if __name__ == "__main__":
    main()
