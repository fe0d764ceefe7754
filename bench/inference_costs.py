"""The measured constants behind the inference rules' estimates
(recommender/perfweb_recommender/rules/ inference.py and model.py), on this machine's CPU, one
thread:

- autograd's cost per operator: serving_autograd_on.py's model (25 top-level operators a
  request: 9 Linear, 8 LayerNorm, 8 GELU) with grad on vs under inference_mode;
- channels_last on serving_conv_eager.py's conv net (batches of 8 x 3x32x32);
- int8 dynamic quantisation against fp32 by the time of one nn.Linear call;
- batching: serving_batch_of_one.py's model, time per sample at batches of 1 and 8.

Times are the thread's CPU time (`time.thread_time`), not wall time: on a shared machine
the neighbours' load would otherwise be measured as the model's. Each figure is the median
of ROUNDS interleaved rounds with min-max. Writes bench/results/inference_costs.json:
    python bench/inference_costs.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

from serving_batch_of_one import model as batch_of_one_model  # noqa: E402
from serving_conv_eager import model as conv_model  # noqa: E402

ROUNDS = 7


def _per_call_us(call: Callable[[], object], calls: int) -> float:
    for _ in range(max(3, calls // 10)):
        call()
    start = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - start) / calls * 1e6


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def _autograd_model() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(64, 2)).eval()


def autograd_us_per_op() -> dict[str, object]:
    model, x, ops = _autograd_model(), torch.randn(4, 64), 25
    costs = []
    for _ in range(ROUNDS):
        grad = _per_call_us(lambda: model(x), 2000)
        with torch.inference_mode():
            off = _per_call_us(lambda: model(x), 2000)
        costs.append((grad - off) / ops)
    return {"top_level_ops_per_request": ops, "us_per_op": _summary(costs)}


def channels_last_speedup() -> dict[str, object]:
    nchw = conv_model().eval()
    nhwc = conv_model().eval().to(memory_format=torch.channels_last)
    nhwc.load_state_dict(nchw.state_dict())
    x = torch.randn(8, 3, 32, 32)
    x_nhwc = x.contiguous(memory_format=torch.channels_last)
    ratios = []
    with torch.inference_mode():
        for _ in range(ROUNDS):
            ratios.append(
                _per_call_us(lambda: nchw(x), 20) / _per_call_us(lambda: nhwc(x_nhwc), 20)
            )
    return {"speedup": _summary(ratios)}


def int8_by_linear_call() -> list[dict[str, object]]:
    rows = []
    for hidden, batch in ((256, 1), (512, 1), (1024, 1), (2048, 16)):
        fp32 = nn.Sequential(
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 10),
        ).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            int8 = torch.ao.quantization.quantize_dynamic(fp32, {nn.Linear}, dtype=torch.qint8)
        x, calls = torch.randn(batch, hidden), 200 if hidden < 2048 else 20
        ratios, per_linear = [], []
        with torch.inference_mode():
            for _ in range(ROUNDS):
                base = _per_call_us(partial(fp32, x), calls)
                per_linear.append(base / 3)  # the MLP's time over its 3 Linear layers
                ratios.append(base / _per_call_us(partial(int8, x), calls))
        rows.append(
            {
                "hidden": hidden,
                "batch": batch,
                "fp32_us_per_linear_call": _summary(per_linear),
                "int8_speedup": _summary(ratios),
            }
        )
    return rows


def batching_speedup() -> dict[str, object]:
    model, x = batch_of_one_model().eval(), torch.randn(1024, 64)
    ratios = []
    with torch.inference_mode():
        for _ in range(ROUNDS):
            one = _per_call_us(lambda: [model(x[i : i + 1]) for i in range(0, 64)], 10) / 64
            eight = _per_call_us(lambda: [model(x[i : i + 8]) for i in range(0, 512, 8)], 10) / 512
            ratios.append(one / eight)
    return {"samples_per_second_at_8_over_1": _summary(ratios)}


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    result = {
        "torch": torch.__version__,
        "threads": 1,
        "rounds": ROUNDS,
        "autograd": autograd_us_per_op(),
        "channels_last": channels_last_speedup(),
        "int8_dynamic": int8_by_linear_call(),
        "batching": batching_speedup(),
    }
    out = REPO / "bench" / "results" / "inference_costs.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
