"""Replayed estimates against a hand measurement on the same host (issue 32, item 1).

For each operator fix the recommender replays (perfweb_recommender.replay), a small model
is served here two ways, by hand: the whole request's CPU time (`time.process_time`, all
threads; what a busy host does not inflate) with and without the fix, interleaved A/B/A/B,
ROUNDS rounds of REQUESTS requests. The hand gain is 1 - fixed/baseline. The same baseline
is then profiled as the agent's windows record it (Kineto, `record_shapes`), its trace turned
into a replay plan and replayed in the helper process; the replayed gain is the case's traced
share x (1 - the replay's B/A ratio). Agreement: both gains positive and within 2x of each
other, or both <= 0 (the fix is not worth it, both ways).

Cases (one CPU thread unless --threads):
- int8: examples/serving_linear_fp32.py's MLP (512-2048-2048-512-10, 16 rows) fp32 vs
  int8 dynamic; and a 64-wide decoder MLP (32-64-64-4, 8 rows) where int8 is slower;
- channels_last: examples/serving_conv_eager.py's conv net (8 x 3x32x32) NCHW vs NHWC;
- sdpa: attention by hand (softmax(q kᵀ/√d) v, 8 x 4 heads x 128 x 32) vs
  scaled_dot_product_attention, between two Linear projections;
- autograd: examples/serving_autograd_on.py's MLP (8 x Linear+LayerNorm+GELU, 64 wide, 4
  rows) with autograd on vs inference_mode.

    python bench/replay_agreement.py [--busy 2] [--threads 1] [--out FILE]

--busy N starts N `python -c "while True: pass"` processes beside it (ended at exit), as a
busy host. Writes bench/results/replay_agreement[-busyN].json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perfweb_recommender.replay import replay_plan
from perfweb_recommender.replay.plan import plan_from_file

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 7
REQUESTS = 30


class HandAttention(nn.Module):
    def __init__(self, width: int = 128, heads: int = 4, fused: bool = False) -> None:
        super().__init__()
        self.heads, self.fused = heads, fused
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            y = nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            y = torch.matmul(torch.softmax(scores, -1), v)
        return self.out(y.transpose(1, 2).reshape(b, n, c))


def _mlp(sizes: list[int]) -> nn.Module:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).eval()


def _conv() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).eval()


def _autograd_mlp() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(64, 2)).eval()


def _quantized(model: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


Serve = Callable[[], None]


def cases() -> dict[str, tuple[Serve, Serve]]:
    """name -> (baseline request, fixed request)."""
    torch.manual_seed(0)
    big, small = _mlp([512, 2048, 2048, 512, 10]), _mlp([32, 64, 64, 4])
    big_q, small_q = _quantized(big), _quantized(small)
    x_big, x_small = torch.randn(16, 512), torch.randn(8, 32)
    conv = _conv()
    conv_last = _conv().to(memory_format=torch.channels_last)
    conv_last.load_state_dict(conv.state_dict())
    images = torch.randn(8, 3, 32, 32)
    images_last = images.contiguous(memory_format=torch.channels_last)
    hand, fused = HandAttention(), HandAttention(fused=True)
    fused.load_state_dict(hand.state_dict())
    tokens = torch.randn(8, 128, 128)
    mlp, rows = _autograd_mlp(), torch.randn(4, 64)

    def under_inference(fn: Callable[[], Any]) -> Serve:
        def run() -> None:
            with torch.inference_mode():
                fn()

        return run

    return {
        "int8 (512-2048 MLP)": (
            under_inference(lambda: big(x_big)),
            under_inference(lambda: big_q(x_big)),
        ),
        "int8 (64-wide decoder)": (
            under_inference(lambda: small(x_small)),
            under_inference(lambda: small_q(x_small)),
        ),
        "channels_last": (
            under_inference(lambda: conv(images)),
            under_inference(lambda: conv_last(images_last)),
        ),
        "sdpa": (under_inference(lambda: hand(tokens)), under_inference(lambda: fused(tokens))),
        "autograd": (lambda: mlp(rows), under_inference(lambda: mlp(rows))),
    }


REPLAY_CASE = {
    "int8 (512-2048 MLP)": "linear",
    "int8 (64-wide decoder)": "linear",
    "channels_last": "conv",
    "sdpa": "attention",
    "autograd": "ops",
}


def hand(baseline: Serve, fixed: Serve) -> dict[str, Any]:
    """Interleaved rounds of REQUESTS requests each way: CPU and wall time per request."""
    baseline(), fixed()
    ratios, walls, base_us = [], [], []
    for _ in range(ROUNDS):
        row = []
        for serve in (baseline, fixed):
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(REQUESTS):
                serve()
            row.append(((time.process_time() - cpu), (time.perf_counter() - wall)))
        (cpu_a, wall_a), (cpu_b, wall_b) = row
        ratios.append(cpu_b / cpu_a)
        walls.append(wall_b / wall_a)
        base_us.append(cpu_a / REQUESTS * 1e6)
    ratio = statistics.median(ratios)
    return {
        "gain": 1 - ratio,
        "ratio": ratio,
        "ratio_min_max": [min(ratios), max(ratios)],
        "wall_ratio": statistics.median(walls),
        "baseline_cpu_us_per_request": statistics.median(base_us),
    }


def replayed(name: str, baseline: Serve, threads: int) -> dict[str, Any]:
    """The baseline profiled as the agent's windows are, then its plan replayed."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank0-step5-10.pt.trace.json"
        profile = torch.autograd.profiler.profile(use_cpu=True, use_kineto=True, record_shapes=True)
        with profile:
            for _ in range(5):
                baseline()
        profile.export_chrome_trace(str(path))
        plan = plan_from_file(path)
    case = REPLAY_CASE[name]
    plan = {**plan, "cases": {case: plan["cases"][case]}} if case in plan.get("cases", {}) else {}
    if not plan:
        return {"error": f"no {case} case in the plan"}
    results, note = replay_plan(plan, threads=threads)
    row = results.get(case)
    if row is None:
        return {"error": note or "no result"}
    return {
        "gain": row.gain,
        "ratio": row.ratio,
        "ratio_min_max": [row.ratio_min, row.ratio_max],
        "share": row.share,
        "pairs": row.pairs,
        "call_cpu_us": row.call_us,
        "skipped": row.skipped,
    }


def agree(hand_gain: float, replay_gain: float) -> bool:
    if hand_gain <= 0.02 and replay_gain <= 0.02:
        return True  # neither is worth it
    if hand_gain <= 0 or replay_gain <= 0:
        return False
    return 0.5 <= replay_gain / hand_gain <= 2.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--busy", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
    ]
    try:
        results = {}
        for name, (baseline, fixed) in cases().items():
            row = {"hand": hand(baseline, fixed), "replay": replayed(name, baseline, args.threads)}
            if "gain" in row["replay"]:
                row["agree_within_2x"] = agree(row["hand"]["gain"], row["replay"]["gain"])
            results[name] = row
            print(
                f"{name:24s} hand gain {row['hand']['gain']:+.1%} "
                f"(ratio {row['hand']['ratio']:.2f}, "
                f"{row['hand']['ratio_min_max'][0]:.2f}-{row['hand']['ratio_min_max'][1]:.2f})  "
                f"replayed {row['replay'].get('gain', float('nan')):+.1%} "
                f"(ratio {row['replay'].get('ratio', float('nan')):.2f}, "
                f"share {row['replay'].get('share', float('nan')):.0%})  "
                f"agree: {row.get('agree_within_2x')}",
                flush=True,
            )
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    out = args.out or REPO / "bench" / "results" / (
        "replay_agreement.json" if not args.busy else f"replay_agreement-busy{args.busy}.json"
    )
    out.write_text(
        json.dumps(
            {
                "threads": args.threads,
                "busy": args.busy,
                "rounds": ROUNDS,
                "requests": REQUESTS,
                "cases": results,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
