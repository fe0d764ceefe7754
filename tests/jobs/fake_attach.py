"""A stand-in for `perf-agent attach --offline DIR -- CMD` with a workload built in.

It honours what the A/B engine hands a round (PERF_AGENT_MAX_STEPS, PERF_AGENT_KNOBS,
PERF_AGENT_AB_LOSS_FILE) and writes step batches in the documented offline layout, so the
engine can be tested without the real agent. The step time is FAKE_STEP_S, divided by
FAKE_SPEEDUP when the candidate's knobs are set, with 5% random noise; FAKE_BURSTY makes
the steps alternate between a quarter and 1.75 times that (the same in both arms: a fix
that does nothing, measured on a noisy loop). FAKE_EXIT makes it fail; FAKE_HANG hangs.
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
    body = {
        "steps": {
            "rank": 0,
            "index": list(range(steps)),
            "t": [0.0] * steps,
            "duration": durations,
            "data_wait": [0.0] * steps,
        }
    }
    with gzip.open(os.path.join(folder, "batch-00000000.json.gz"), "wt") as handle:
        json.dump(body, handle)
    time.sleep(sum(durations))
    if os.environ.get("FAKE_LOSS"):
        with open(os.environ["PERF_AGENT_AB_LOSS_FILE"], "w") as handle:
            json.dump([float(os.environ["FAKE_LOSS"])] * steps, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
