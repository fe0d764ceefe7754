"""The heaviest GPU kernels of each trace in an offline directory, as the recommender
classifies them (tensor core / fp32 SIMT / dense math): the check of that classification on
real kernel names.

    python -m bench.gpu.kernels OFFLINE_DIR [--top 8]     (prints JSON)

Runs in the recommender's environment (numpy, msgspec, orjson), like `python -m
perfweb_recommender`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from perfweb_recommender.trace import classify
from perfweb_recommender.trace.loader import load_trace
from perfweb_recommender.trace.model import KIND_KERNEL


def top_kernels(trace_path: Path, *, top: int) -> list[dict[str, Any]]:
    """The `top` kernels by total time in one trace, with the recommender's classes."""
    trace = load_trace(trace_path)
    gpu = trace.gpu
    totals: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for name_id, duration, kind in zip(gpu.name_id, gpu.dur, gpu.kind, strict=True):
        if kind == KIND_KERNEL:
            totals[int(name_id)] += float(duration)
            counts[int(name_id)] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    return [
        {
            "name": trace.gpu_names[name_id][:160],
            "us": round(us, 1),
            "count": counts[name_id],
            "dense_math": classify.is_dense_math_kernel(trace.gpu_names[name_id]),
            "tensor_core": classify.is_tensor_core_kernel(trace.gpu_names[name_id]),
            "fp32_simt": classify.is_fp32_simt_kernel(trace.gpu_names[name_id]),
        }
        for name_id, us in ranked
    ]


def main(argv: list[str] | None = None) -> int:
    """Print {trace file name: [kernels]} for every trace under OFFLINE_DIR."""
    parser = argparse.ArgumentParser(prog="python -m bench.gpu.kernels")
    parser.add_argument("offline", type=Path)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    result = {
        path.name: top_kernels(path, top=args.top)
        for path in sorted(args.offline.rglob("*.pt.trace.json*"))
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
