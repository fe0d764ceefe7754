"""What one `perfweb_agent.log(...)` call costs the training thread.

    python bench/agent_log_cost.py [--rounds 7] [--calls 40000] [--out FILE.json]

One process with an agent attached offline (to a temporary directory, as `perf-agent attach
--offline` would be), rounds interleaved so that drift on a shared machine hits every case
alike. Cases: `no-op` (a function call doing nothing: the loop's own cost), `floats`
(`perfweb_agent.log(loss=0.5, tokens=4096)`), `tensor` (`perfweb_agent.log(loss=<0-d CPU tensor>,
tokens=4096)`: the float() of the tensor is in it) and `bad-name` (a name that is dropped
with its one warning). 40,000 calls of 2 scalars stay under the sample buffer's bound, so
nothing is dropped for room. Reported per case: the median over rounds of the microseconds
per call, with min-max, and the added cost over `no-op`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _noop(**scalars: Any) -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args()
    os.environ["PERF_AGENT_LOG_LEVEL"] = "ERROR"  # the bad-name case's one warning
    import torch

    import perfweb_agent

    with tempfile.TemporaryDirectory() as folder:
        running = perfweb_agent.attach(
            offline=folder, name="log-cost", interval=1.0, flush_interval=1.0
        )
        assert running is not None
        loss = torch.tensor(0.5)
        cases = {
            "no-op": lambda: _noop(loss=0.5, tokens=4096),
            "floats": lambda: perfweb_agent.log(loss=0.5, tokens=4096),
            "tensor": lambda: perfweb_agent.log(loss=loss, tokens=4096),
            "bad-name": lambda: perfweb_agent.log(**{"Bad Name": 0.5}),
        }
        per_call: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(options.rounds):
            for name, call in cases.items():
                began = time.perf_counter()
                for _ in range(options.calls):
                    call()
                per_call[name].append((time.perf_counter() - began) / options.calls * 1e6)
                time.sleep(1.2)  # let the sampler drain the buffer between cases
        dropped = running.dropped
        perfweb_agent.shutdown()
    base = statistics.median(per_call["no-op"])
    report = {
        "rounds": options.rounds,
        "calls_per_round": options.calls,
        "dropped_samples": dropped,
        "load_1min": os.getloadavg()[0],
        "cpu_count": os.cpu_count(),
        "cases": {
            name: {
                "median_us": statistics.median(v),
                "min_us": min(v),
                "max_us": max(v),
                "added_us": statistics.median(v) - base,
            }
            for name, v in per_call.items()
        },
    }
    text = json.dumps(report, indent=2)
    print(text)
    if options.out:
        options.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
