"""A stand-in for `perf-agent attach --offline DIR -- CMD` with a workload built in.

It honours what the A/B engine hands a round (PERF_AGENT_MAX_STEPS, PERF_AGENT_KNOBS,
PERF_AGENT_AB_LOSS_FILE) and writes step batches in the documented offline layout, so the
engine can be tested without the real agent. The step time is FAKE_STEP_S, divided by
FAKE_SPEEDUP when the candidate's knobs are set, with 5% random noise; FAKE_BURSTY makes
the steps alternate between a quarter and 1.75 times that (the same in both arms: a fix
that does nothing, measured on a noisy loop). FAKE_EXIT makes it fail; FAKE_HANG hangs.
FAKE_KIND=inference records what an inference run does: `workload.kind`, a batch size of
FAKE_BATCH per request, a `process.rss` sample, and (in PERF_AGENT_AB_OUTPUTS_FILE) the
outputs of its requests, the candidate's moved by FAKE_OUTPUT_SHIFT; FAKE_MEMORY_MB holds
that much memory while it runs (what the arm's peak RSS must see).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
import time
import uuid


def main() -> int:
    args = sys.argv[1:]
    if args[0] == "--no-outputs":  # an arm whose probe wrote nothing (a model never found)
        os.environ.pop("PERF_AGENT_AB_OUTPUTS_FILE", None)
        args = args[1:]
    assert args[0] == "attach" and args[1] == "--offline" and args[3] == "--", args
    offline = args[2]
    if os.environ.get("FAKE_EXIT"):
        print("boom: the workload failed", file=sys.stderr)
        return int(os.environ["FAKE_EXIT"])
    if os.environ.get("FAKE_PIDFILE"):
        with open(os.environ["FAKE_PIDFILE"], "a") as handle:
            handle.write(f"{os.getpid()}\n")
    if os.environ.get("FAKE_HANG"):
        time.sleep(3600)
    steps = int(os.environ["PERF_AGENT_MAX_STEPS"])
    step_s = float(os.environ.get("FAKE_STEP_S", "0.002"))
    if os.environ.get("PERF_AGENT_KNOBS"):
        step_s /= float(os.environ.get("FAKE_SPEEDUP", "1"))
    folder = os.path.join(offline, uuid.uuid4().hex, uuid.uuid4().hex)
    os.makedirs(folder)
    if os.environ.get("FAKE_BURSTY"):
        durations = [step_s * (0.25 if i % 2 else 1.75) for i in range(steps)]
    else:
        durations = [step_s * random.uniform(0.95, 1.05) for _ in range(steps)]
    body: dict = {
        "steps": {
            "rank": 0,
            "index": list(range(steps)),
            "t": [0.0] * steps,
            "duration": durations,
            "data_wait": [0.0] * steps,
        }
    }
    if os.environ.get("FAKE_KIND") == "inference":
        _as_inference(body, steps)
    with gzip.open(os.path.join(folder, "batch-00000000.json.gz"), "wt") as handle:
        json.dump(body, handle)
    held = bytearray(int(float(os.environ.get("FAKE_MEMORY_MB", "0")) * 2**20))
    held[::4096] = b"x" * len(held[::4096])  # touch every page: resident, not just reserved
    time.sleep(sum(durations))
    if os.environ.get("FAKE_LOSS"):
        with open(os.environ["PERF_AGENT_AB_LOSS_FILE"], "w") as handle:
            json.dump([float(os.environ["FAKE_LOSS"])] * steps, handle)
    return 0


def _as_inference(body: dict, steps: int) -> None:
    body["facts"] = {"workload.kind": "inference", "steps.source": "module"}
    times = [1000.0 + i for i in range(steps)]
    body["steps"]["t"] = times
    batch = float(os.environ.get("FAKE_BATCH", "8"))
    body["metrics"] = [
        {"device": "rank:0", "name": "step.batch_size", "t": times, "v": [batch] * steps},
        {"device": "process", "name": "process.rss", "t": [times[0]], "v": [50e6]},
    ]
    path = os.environ.get("PERF_AGENT_AB_OUTPUTS_FILE")
    if not path:
        return
    shift = float(os.environ.get("FAKE_OUTPUT_SHIFT", "0"))
    if not os.environ.get("PERF_AGENT_KNOBS"):
        shift = 0.0  # the baseline
    rows = [[1.0 - shift, 0.0], [0.0, 1.0]]  # a shift of 1.5 flips the first row's arg-max
    requests = [
        {
            "shape": [2, 2],
            "top1": [max(range(2), key=row.__getitem__) for row in rows],
            "values": [v for row in rows for v in row],
        }
        for _ in range(min(steps, 64))
    ]
    with open(path, "w") as handle:
        json.dump({"requests": requests, "note": ""}, handle)


if __name__ == "__main__":
    sys.exit(main())
