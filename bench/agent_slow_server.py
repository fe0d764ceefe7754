"""Does the agent sample on time while its server is slow? Ticks against a server that
answers at once and one that answers every request `--delay` seconds late.

    python bench/agent_slow_server.py [--rounds 2] [--seconds 20] [--delay 10]
                                      [--baseline-ref REF] [--out FILE.json]

Each measurement is a fresh Python process that runs the agent's Sender (its own threads,
its default settings but a 0.1 s sampling interval and a 1 s flush interval) for
`--seconds`, against a stdlib HTTP server in the same process whose every reply waits
`--delay` seconds (0 for the healthy case) — the request itself is taken at once, as a slow
proxy or an overloaded server would. The tick records when it ran. Reported per agent
(this tree, and the agent of `--baseline-ref`, default `main`, when given) and per server:
the gaps between ticks (median, p99, max), the share of ticks later than 1.5 intervals, and
how many batches the server received while the run was going. Rounds alternate the
configurations so that drift on a shared machine hits them alike; the medians over rounds
are printed with their min–max.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent(
    """
    import gzip, json, sys, threading, time, uuid
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seconds, delay, spill = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    batches = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            arrived = time.monotonic()
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path.endswith("/batch"):
                batches.append((arrived, json.loads(gzip.decompress(raw))["seq"]))
            time.sleep(max(0.0, arrived + delay - time.monotonic()))
            data = b'{"ok": true}'
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        def handle_error(self, *a):
            pass

    httpd = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    try:
        from perfweb_agent.core.config import load_settings
    except ImportError:  # a baseline from before the agent's bottom layer (issue 28)
        from perfweb_agent.runtime.config import load_settings
    from perfweb_agent.delivery.sender import Sender

    settings = load_settings(env={}, server=f"http://127.0.0.1:{httpd.server_address[1]}",
                             token="t", interval=0.1, flush_interval=1.0, spill_dir=spill)
    ticks = []
    agent_id = uuid.uuid4().hex
    start = {"run_id": settings.run_id, "agent_id": agent_id, "role": "worker"}
    def tick():
        ticks.append(time.monotonic())
        samples.add("process", "process.rss", time.time(), 1.0)
    try:  # the sender sends what Batches cut (issue 28)
        from perfweb_agent.delivery.batches import Batches
    except ImportError:  # a baseline whose sender held the buffers
        sender = Sender(settings, agent_id, tick=tick)
        samples = sender.samples
        began = time.monotonic()
        sender.start(start)
    else:
        cutter = Batches(settings, agent_id, start_body=lambda: dict(start))
        samples = cutter.samples
        sender = Sender(settings, agent_id, next_batch=cutter.cut, tick=tick)
        began = time.monotonic()
        sender.start()
    time.sleep(seconds)
    ended = time.monotonic()
    live = len({seq for t, seq in batches if t <= ended})
    sender.close(*([] if hasattr(sender, "link") else [None]), 0.5)
    ticks = [t for t in ticks if t <= ended]
    print(json.dumps({"ticks": ticks, "live_batches": live, "began": began,
                      "timeout": settings.http_timeout}))
    """
)


def baseline_tree(ref: str, into: str) -> str:
    """The agent package of git ref `ref`, extracted under `into`; returns its root."""
    archive = subprocess.run(
        ["git", "archive", ref, "agent"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    if os.path.exists(os.path.join(into, "agent", "perfweb_agent", "delivery", "sender.py")):
        return os.path.join(into, "agent")  # the folder named as it is imported (issue 28)
    if not os.path.exists(os.path.join(into, "agent", "delivery", "sender.py")):
        raise SystemExit(
            f"{ref} predates the perfweb_agent import names (issue 15): pick a later baseline ref"
        )
    os.symlink("agent", os.path.join(into, "perfweb_agent"))  # a ref from before issue 28
    return into


def measure(tree: str, seconds: float, delay: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as spill:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
        env["PYTHONPATH"] = tree
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(seconds), str(delay), spill],
            env=env,
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
            cwd=spill,  # not the repository: `-c` puts the working directory on sys.path
        )
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    ticks = raw["ticks"]
    gaps = sorted(b - a for a, b in zip(ticks, ticks[1:], strict=False))
    return {
        "ticks": len(ticks),
        "gap_median_s": statistics.median(gaps),
        "gap_p99_s": gaps[int(0.99 * (len(gaps) - 1))],
        "gap_max_s": gaps[-1],
        "late_share": sum(g > 0.15 for g in gaps) / len(gaps),
        "live_batches": raw["live_batches"],
        "http_timeout_s": raw["timeout"],
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--delay", type=float, default=10.0)
    parser.add_argument("--baseline-ref", default="", help="also measure this git ref's agent")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": str(ROOT / "agent")}
        if args.baseline_ref:
            trees[args.baseline_ref] = baseline_tree(args.baseline_ref, tmp)
        configs = [(name, delay) for name in trees for delay in (0.0, args.delay)]
        results: dict[str, list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            order = configs if round_ % 2 == 0 else configs[::-1]
            for name, delay in order:
                key = f"{name}, replies after {delay:g} s"
                results.setdefault(key, []).append(measure(trees[name], args.seconds, delay))
    report = {
        key: {
            metric: summary([run[metric] for run in runs])
            for metric in ("gap_median_s", "gap_p99_s", "gap_max_s", "late_share", "live_batches")
        }
        | {"http_timeout_s": runs[0]["http_timeout_s"], "rounds": len(runs)}
        for key, runs in results.items()
    }
    for key, metrics in report.items():
        line = ", ".join(
            f"{m} {v['median']:.3g} ({v['min']:.3g}–{v['max']:.3g})"
            for m, v in metrics.items()
            if isinstance(v, dict)
        )
        print(f"{key} [timeout {metrics['http_timeout_s']:g} s]: {line}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
