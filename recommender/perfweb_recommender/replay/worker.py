"""The replay itself, in a helper process: `python -m perfweb_recommender.replay.worker`.

Reads a request on stdin (`{"plan": ..., "threads": N, "repeats": R, "budget_s": S}`),
imports torch, sets the run's intra-op thread count, and times each case both ways on
random inputs of the recorded shapes:

- `linear`: fp32 `aten::linear` (A) vs int8 dynamic (`quantized::linear_dynamic` on packed
  int8 weights, what `quantize_dynamic` runs) (B);
- `conv`: NCHW (A) vs channels_last input and weights (B);
- `attention`: softmax(q kᵀ / √d) v by hand (A) vs `scaled_dot_product_attention` (B);
- `ops`: the recorded top-level operator list with autograd recording (float inputs that
  require grad) (A) vs under `torch.inference_mode()` (B).

Each sample is the CPU time of the whole process (all intra-op threads; what a busy host
cannot inflate, unlike wall time) of one pass over a case's calls, weighted by their recorded
counts; the arms alternate A, B, A, B, ... after a warm-up pass of each. Writes
`{"cases": {case: {"a_us": [...], "b_us": [...], "wall_a_us": [...], "wall_b_us": [...],
"calls": n, "skipped": n}}, "torch": version, "threads": N}` on stdout.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import orjson

Arm = Callable[[], None]


def _timed(arm: Arm) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    arm()
    return (time.process_time() - cpu) * 1e6, (time.perf_counter() - wall) * 1e6


SAMPLE_US = 5000.0  # a sample repeats the pass until it takes about this much CPU time
MAX_INNER = 1000


def _interleaved(a: Arm, b: Arm, repeats: int, budget_s: float) -> dict[str, list[float]]:
    """A/B/A/B samples after a warm-up of each (µs of one pass); stops early past
    `budget_s` (two pairs at least). A sample runs the pass `inner` times, enough to take
    about SAMPLE_US of CPU, so that the clock's resolution and one-off costs drown."""
    a()
    b()
    once = max(_timed(a)[0], _timed(b)[0], 1.0)
    inner = max(1, min(MAX_INNER, int(SAMPLE_US / once)))

    def many(arm: Arm) -> Arm:
        def run() -> None:
            for _ in range(inner):
                arm()

        return run

    out: dict[str, list[float]] = {"a_us": [], "b_us": [], "wall_a_us": [], "wall_b_us": []}
    deadline = time.perf_counter() + budget_s
    for i in range(repeats):
        for arm, key in ((many(a), "a"), (many(b), "b")):
            cpu, wall = _timed(arm)
            out[f"{key}_us"].append(round(cpu / inner, 3))
            out[f"wall_{key}_us"].append(round(wall / inner, 3))
        if i >= 1 and time.perf_counter() > deadline:
            break
    return out


def _linear_arms(torch: Any, shapes: list[dict[str, Any]]) -> tuple[Arm, Arm, int]:
    fp32, int8 = [], []
    for row in shapes:
        x = torch.randn(row["x"])
        w = torch.randn(row["w"]) * 0.05
        bias = torch.randn(row["w"][0]) if row["bias"] else None
        scale = float(w.abs().max()) / 127 or 1.0
        qw = torch.quantize_per_tensor(w, scale, 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(qw, bias)
        fp32.append((x, w, bias, row["calls"]))
        int8.append((x, packed, row["calls"]))
    linear, dynamic = torch.nn.functional.linear, torch.ops.quantized.linear_dynamic

    def a() -> None:
        for x, w, bias, n in fp32:
            for _ in range(n):
                linear(x, w, bias)

    def b() -> None:
        for x, packed, n in int8:
            for _ in range(n):
                dynamic(x, packed)

    return a, b, sum(r["calls"] for r in shapes)


def _conv_arms(torch: Any, shapes: list[dict[str, Any]]) -> tuple[Arm, Arm, int]:
    nchw, nhwc = [], []
    last = torch.channels_last
    for row in shapes:
        x, w = torch.randn(row["x"]), torch.randn(row["w"])
        bias = torch.randn(row["w"][0]) if row["bias"] else None
        kw = {
            "stride": row["stride"],
            "padding": row["padding"],
            "dilation": row["dilation"],
            "groups": row["groups"],
        }
        nchw.append((x, w, bias, kw, row["calls"]))
        nhwc.append(
            (
                x.contiguous(memory_format=last),
                w.contiguous(memory_format=last),
                bias,
                kw,
                row["calls"],
            )
        )
    conv = torch.nn.functional.conv2d

    def run(rows: list[Any]) -> Arm:
        def arm() -> None:
            with torch.inference_mode():
                for x, w, bias, kw, n in rows:
                    for _ in range(n):
                        conv(x, w, bias, **kw)

        return arm

    return run(nchw), run(nhwc), sum(r["calls"] for r in shapes)


def _attention_arms(torch: Any, shapes: list[dict[str, Any]]) -> tuple[Arm, Arm, int]:
    rows = [
        (torch.randn(r["q"]), torch.randn(r["k"]), torch.randn(r["v"]), r["calls"]) for r in shapes
    ]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def a() -> None:
        with torch.inference_mode():
            for q, k, v, n in rows:
                scale = 1.0 / math.sqrt(q.shape[-1])
                for _ in range(n):
                    torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, -1) @ v

    def b() -> None:
        with torch.inference_mode():
            for q, k, v, n in rows:
                for _ in range(n):
                    sdpa(q, k, v)

    return a, b, sum(r[3] for r in rows)


FLOAT = "float"
INT_TYPES = frozenset({"long int", "int"})


def _op_call(torch: Any, op: dict[str, Any], grad: bool) -> Callable[[], Any] | None:
    """One recorded operator as a call on random inputs of its shapes; None if it cannot be
    rebuilt (a type it does not know, an overload the arguments do not fit)."""
    name = str(op.get("name") or "")
    if not name.startswith("aten::"):
        return None
    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
    if packet is None:
        return None
    args: list[Any] = []
    dims, types, concrete = op.get("dims") or [], op.get("types") or [], op.get("concrete") or []
    inplace = name.endswith("_")
    for i, kind in enumerate(types):
        shape = dims[i] if i < len(dims) else []
        text = concrete[i] if i < len(concrete) else ""
        if kind == FLOAT and isinstance(shape, list):
            tensor = torch.randn(shape) if shape else torch.randn(())
            if grad and not (inplace and i == 0):
                tensor.requires_grad_(True)
            args.append(tensor)
        elif kind in INT_TYPES and isinstance(shape, list) and shape:
            args.append(torch.zeros(shape, dtype=torch.long))
        elif kind in ("Scalar", "ScalarList") and text != "":
            from perfweb_recommender.replay.plan import _literal

            args.append(_literal(text))
        elif kind == "" and text == "":
            args.append(None)
        else:
            return None
    while args and args[-1] is None:
        args.pop()

    def call() -> Any:
        return packet(*args)

    try:
        call()
    except Exception:  # noqa: BLE001 - an operator the random inputs do not fit: left out
        return None
    return call


def _ops_arms(torch: Any, case: dict[str, Any]) -> tuple[Arm, Arm, int, int]:
    recorded = case["ops"]
    with_grad, without = [], []
    for op in recorded:
        a = _op_call(torch, op, grad=True)
        if a is None:
            continue
        with torch.inference_mode():
            b = _op_call(torch, op, grad=False)
        if b is not None:
            with_grad.append(a)
            without.append(b)

    def arm_a() -> None:
        for call in with_grad:
            call()

    def arm_b() -> None:
        with torch.inference_mode():
            for call in without:
                call()

    return arm_a, arm_b, len(with_grad), len(recorded) - len(with_grad)


def replay(request: dict[str, Any]) -> dict[str, Any]:
    """Time every case of the plan both ways (see the module's docstring)."""
    import torch

    threads = int(request.get("threads") or torch.get_num_threads())
    torch.set_num_threads(max(1, threads))
    repeats = max(2, int(request.get("repeats", 7)))
    budget = float(request.get("budget_s", 2.0))
    cases = (request.get("plan") or {}).get("cases") or {}
    out: dict[str, Any] = {}
    for kind, case in cases.items():
        skipped = 0
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if kind == "linear":
                    a, b, calls = _linear_arms(torch, case["shapes"])
                elif kind == "conv":
                    a, b, calls = _conv_arms(torch, case["shapes"])
                elif kind == "attention":
                    a, b, calls = _attention_arms(torch, case["shapes"])
                elif kind == "ops":
                    a, b, calls, skipped = _ops_arms(torch, case)
                else:
                    continue
                if calls == 0:
                    continue
                samples = _interleaved(a, b, repeats, budget)
        except Exception as exc:  # noqa: BLE001 - one case failing leaves the others
            out[kind] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        out[kind] = {**samples, "calls": calls, "skipped": skipped}
    return {"cases": out, "torch": torch.__version__, "threads": torch.get_num_threads()}


def main() -> int:
    request = orjson.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(orjson.dumps(replay(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
