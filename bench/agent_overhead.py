"""The agent's overhead on CPU training and inference loops: with and without it, interleaved.

    python bench/agent_overhead.py [--runs 10] [--steps 400] [--workloads training,inference]
                                   [--out FILE.json]

Each run is a fresh Python process running the same loop. Workloads: `training` (MLP,
DataLoader over tensors, AdamW; steps from the optimizer hook) and `inference` (the same MLP
in eval() under inference_mode over a DataLoader, no optimizer; requests from the outermost
module's calls). Modes: `baseline` (no agent), `agent-1hz` and `agent-10hz` (agent started
exactly as `perf-agent attach` starts it, writing to an offline directory), and `profiler`
(10 Hz plus one profiler window, whose steps are reported separately). Runs are interleaved
(baseline, 1 Hz, 10 Hz, profiler, baseline, ...) so that drift on a shared machine hits
every mode alike. Reported per workload and mode: the median over runs of each run's median
step time with its min-max, the ratio against baseline, the RSS at the end and the peak RSS
(VmHWM) against baseline; for the profiler window, the step that opens it, the step that
closes it and the steps inside it (each as a ratio to the run's median step outside it), the
worst of them, its peak-RSS cost, and the worst step after it (when the agent thread exports
and ships the trace) beside the same steps' worst in the 10 Hz runs, which have no window.
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

from agent_overhead_blocks import run_blocks  # noqa: E402 - bench/ is on sys.path as a script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPORT = """
    with open("/proc/self/status") as f:
        status = dict(l.split(":", 1) for l in f)
    kib = lambda key: int(status[key].split()[0]) * 1024
    print(json.dumps({"times": times[warm:], "rss": kib("VmRSS"), "peak_rss": kib("VmHWM"),
                      "warm": warm}))
"""

LOOP = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    steps, warm = int(sys.argv[1]), 30  # warm: WARM in the benchmark
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256 * 64, 256), torch.randn(256 * 64, 1))
    loader = DataLoader(data, batch_size=256, shuffle=True, num_workers=0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    it = iter(loader)
    for step in range(steps + warm):
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    """
    + REPORT
)

INFERENCE_LOOP = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    steps, warm = int(sys.argv[1]), 30  # warm: WARM in the benchmark
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256 * 64, 256))
    loader = DataLoader(data, batch_size=256, num_workers=0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 1)).eval()
    times = []
    it = iter(loader)
    with torch.inference_mode():
        for step in range(steps + warm):
            t0 = time.perf_counter()
            try:
                (x,) = next(it)
            except StopIteration:
                it = iter(loader)
                (x,) = next(it)
            model(x).argmax()
            times.append(time.perf_counter() - t0)
    """
    + REPORT
)
INPUT_BOUND_LOOP = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    steps, warm = int(sys.argv[1]), 30  # warm: WARM in the benchmark

    class Augmented(Dataset):  # many small tensor ops per sample, in the main process
        def __len__(self):
            return 10**6
        def __getitem__(self, i):
            x = torch.zeros(64)
            for k in range(20):
                x = x + k
            return x

    loader = DataLoader(Augmented(), batch_size=32, num_workers=0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).eval()
    times = []
    it = iter(loader)
    with torch.inference_mode():
        for step in range(steps + warm):
            t0 = time.perf_counter()
            model(next(it)).argmax()
            times.append(time.perf_counter() - t0)
    """
    + REPORT
)
LOOPS = {"training": LOOP, "inference": INFERENCE_LOOP, "input-bound": INPUT_BOUND_LOOP}
DEFAULT_WORKLOADS = "training,inference"

MODES: dict[str, dict[str, str]] = {
    "baseline": {},
    "agent-1hz": {"PERF_AGENT_INTERVAL": "1", "PERF_AGENT_PROFILE": "0"},
    "agent-10hz": {"PERF_AGENT_INTERVAL": "0.1", "PERF_AGENT_PROFILE": "0"},
    "profiler": {
        "PERF_AGENT_INTERVAL": "0.1",
        "PERF_AGENT_PROFILE": "1",
        "PERF_AGENT_PROFILE_STEPS": "5",  # warm-up steps set per run: a third of the run
    },
}
WARM = 30  # the loop's untimed warm-up steps


def window(steps: int) -> tuple[int, int]:
    """Measured-step indexes a profiler window covers (opens after warm-up, 5 steps + close)."""
    start = (steps + WARM) // 3 - WARM
    return start, start + 6


def run_once(script: Path, mode: str, steps: int, offline: str) -> dict[str, Any]:
    """One fresh process in `mode`; its step times and final RSS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    if mode != "baseline":
        from perfweb_agent.cli.attach import child_env
        from perfweb_agent.core.config import load_settings

        settings = load_settings(env={}, offline=offline)
        env = child_env(settings, base=env)
        env.update(MODES[mode])
        env["PERF_AGENT_PROFILE_WARMUP_STEPS"] = str((steps + WARM) // 3)
        env["PERF_AGENT_OFFLINE"] = offline
    out = subprocess.run(
        [sys.executable, str(script), str(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spread(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, float]:
    """Median with min and max, scaled and rounded."""
    return {
        "median": round(statistics.median(values) * scale, digits),
        "min": round(min(values) * scale, digits),
        "max": round(max(values) * scale, digits),
    }


def summarise(results: dict[str, list[dict[str, Any]]], steps: int) -> dict[str, Any]:
    """Median step times (min-max), ratios to baseline, RSS, profiler-window cost."""
    medians = {m: [statistics.median(r["times"]) for r in rs] for m, rs in results.items()}
    base = statistics.median(medians["baseline"])
    base_rss = statistics.median(r["rss"] for r in results["baseline"])
    base_peak = statistics.median(r.get("peak_rss", r["rss"]) for r in results["baseline"])
    summary: dict[str, Any] = {}
    for mode, values in medians.items():
        med = statistics.median(values)
        rss = statistics.median(r["rss"] for r in results[mode])
        peaks = [r.get("peak_rss", r["rss"]) for r in results[mode]]
        summary[mode] = {
            "runs": len(values),
            "median_step_ms": round(med * 1e3, 4),
            "step_ms": _spread(values, 1e3),
            "ratio_to_baseline": _spread([v / base for v in values], 1.0, 4),
            "slowdown_pct": round(100 * (med / base - 1), 3),
            "rss_mb": round(rss / 2**20, 1),
            "added_rss_mb": round((rss - base_rss) / 2**20, 1),
            "added_peak_rss_mb": _spread([(p - base_peak) / 2**20 for p in peaks], 1.0, 1),
            "per_run_median_ms": [round(v * 1e3, 2) for v in values],
        }
    if results.get("profiler"):
        summary["profiler"].update(_window_cost(results["profiler"], steps))
        for mode in ("profiler", "agent-10hz"):  # the second: same steps, no window
            if results.get(mode):
                summary[mode]["worst_step_after_window_extra_ms"] = _spread(
                    [_worst_after(r["times"], steps) for r in results[mode]], 1e3, 1
                )
    return summary


def _worst_after(times: list[float], steps: int) -> float:
    """The slowest step after the window (the export, merge and upload run then) minus the
    run's median step there; for a mode without a window, the same steps."""
    hi = window(steps)[1]
    after = times[hi:]
    return max(after) - statistics.median(after)


def _window_cost(runs: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """The steps that open and close the window, and those inside it, against the rest.

    The window opens at the boundary that ends measured step `lo - 1` and closes at the one
    that ends step `lo + 4` (five steps later); each is a ratio to the same run's median step
    after the window.
    """
    lo, hi = window(steps)
    opening, closing, inside, extra, worst = [], [], [], [], []
    for run in runs:
        times = run["times"]
        typical = statistics.median(times[hi + 5 :])
        worst.append(max(times[lo - 1 : lo + 5]) - typical)
        opening.append(times[lo - 1] / typical)
        closing.append(times[lo + 4] / typical)
        inside.append(statistics.median(times[lo : lo + 4]) / typical)
        extra.append(sum(times[lo - 1 : lo + 5]) - 6 * typical)
    return {
        "window_step_ms": round(
            statistics.median(t for r in runs for t in r["times"][lo : lo + 4]) * 1e3, 3
        ),
        "window_total_extra_ms": round(statistics.median(extra) * 1e3, 1),
        "outside_window_step_ms": round(
            statistics.median(t for r in runs for t in r["times"][hi + 5 :]) * 1e3, 4
        ),
        "opening_step_ratio": _spread(opening, 1.0, 2),
        "closing_step_ratio": _spread(closing, 1.0, 2),
        "inside_window_step_ratio": _spread(inside, 1.0, 2),
        "opening_step_extra_ms": _spread(
            [
                (o - 1.0) * statistics.median(r["times"][hi + 5 :])
                for o, r in zip(opening, runs, strict=True)
            ],
            1e3,
            1,
        ),
        "worst_window_step_extra_ms": _spread(worst, 1e3, 1),
        "closing_step_extra_ms": _spread(
            [
                (c - 1.0) * statistics.median(r["times"][hi + 5 :])
                for c, r in zip(closing, runs, strict=True)
            ],
            1e3,
            1,
        ),
    }


MICRO = textwrap.dedent(
    """
    import json, time, torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data import dataloader as dl
    import torch.optim.optimizer as optim_mod

    def loop(n):
        model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        loader = DataLoader(TensorDataset(torch.zeros(n, 1)), batch_size=1)
        t0 = time.thread_time()  # CPU time of this thread: blind to other processes' load
        for (x,) in loader:
            opt.step()
        return (time.thread_time() - t0) / n

    bare_next = dl._BaseDataLoaderIter.__next__
    bare_to = torch.Tensor.to
    import perfweb_agent
    a = perfweb_agent.attach(offline="OFFLINE", interval=3600, profile=False)
    wrapped_next = dl._BaseDataLoaderIter.__next__
    hook, pre = a.patches._handles[0], a.patches._handles[1]
    post_hook = optim_mod._global_optimizer_post_hooks[hook.id]
    pre_hook = optim_mod._global_optimizer_pre_hooks[pre.id]  # the step anatomy's

    def agent_on(on):
        dl._BaseDataLoaderIter.__next__ = wrapped_next if on else bare_next
        if on:
            optim_mod._global_optimizer_post_hooks[hook.id] = post_hook
            optim_mod._global_optimizer_pre_hooks[pre.id] = pre_hook
        else:
            optim_mod._global_optimizer_post_hooks.pop(hook.id, None)
            optim_mod._global_optimizer_pre_hooks.pop(pre.id, None)

    n, off, on = 5000, [], []
    loop(2000)
    for _ in range(15):  # interleaved A/B; the minimum of each is the least disturbed
        agent_on(False); off.append(loop(n))
        agent_on(True); on.append(loop(n))
    # the step anatomy's part (already inside per_step_us for the data and optimizer phases):
    # four phases entered and left per step (data, forward, backward, optimizer), the reader's
    # CPU per step (agent thread), and the Tensor.to wrapper's cost per call
    anatomy = a.timer.anatomy
    def marks(n):
        t0 = time.thread_time()
        for _ in range(n):
            for phase in (0, 2, 3, 4):
                anatomy.enter(phase); anatomy.leave(phase)
            a.timer.boundary()
        marked = (time.thread_time() - t0) / n
        t0 = time.thread_time()
        anatomy.read()
        return marked, (time.thread_time() - t0) / n
    def to_calls(n, to):
        x = torch.zeros(1)
        t0 = time.thread_time()
        for _ in range(n):
            to(x, torch.float64)
        return (time.thread_time() - t0) / n
    wrapped_to = torch.Tensor.to
    mark_costs = [marks(5000) for _ in range(15)]
    to_extra = min(to_calls(20000, wrapped_to) for _ in range(15)) - min(
        to_calls(20000, bare_to) for _ in range(15))
    a._tick()  # first tick: NVML init, devices
    ticks = []
    for _ in range(50):
        t0 = time.thread_time()
        a._tick()
        ticks.append(time.thread_time() - t0)
    ticks.sort()
    print(json.dumps({"per_step_us": (min(on) - min(off)) * 1e6, "bare_step_us": min(off) * 1e6,
                      "tick_cpu_ms": ticks[len(ticks) // 2] * 1e3,
                      "anatomy_marks_per_step_us": min(m for m, _ in mark_costs) * 1e6,
                      "anatomy_read_per_step_us": min(r for _, r in mark_costs) * 1e6,
                      "tensor_to_call_us": to_extra * 1e6}))
    """
)


MICRO_INFERENCE = textwrap.dedent(
    """
    import json, time, torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data import dataloader as dl

    bare_next = dl._BaseDataLoaderIter.__next__
    import perfweb_agent
    a = perfweb_agent.attach(offline="OFFLINE", interval=3600, profile=False)
    wrapped_next = dl._BaseDataLoaderIter.__next__
    model, other = torch.nn.Linear(1, 1).eval(), torch.nn.Linear(1, 1).eval()
    with torch.inference_mode():
        model(torch.zeros(1, 1))  # the primary module: Linear's __call__ is wrapped now
    wrapped_call = torch.nn.Linear.__dict__["__call__"]

    def agent_on(on):
        dl._BaseDataLoaderIter.__next__ = wrapped_next if on else bare_next
        if on:
            torch.nn.Linear.__call__ = wrapped_call
        else:
            del torch.nn.Linear.__call__  # torch's own Module.__call__ again

    def loop(n, module):
        loader = DataLoader(TensorDataset(torch.zeros(n, 1)), batch_size=1)
        t0 = time.thread_time()
        with torch.inference_mode():
            for (x,) in loader:
                module(x)
        return (time.thread_time() - t0) / n

    def calls(n, module):
        x = torch.zeros(1, 1)
        t0 = time.thread_time()
        with torch.inference_mode():
            for _ in range(n):
                module(x)
        return (time.thread_time() - t0) / n

    n, off, on, other_off, other_on = 5000, [], [], [], []
    loop(2000, model)
    for _ in range(15):  # interleaved A/B; the minimum of each is the least disturbed
        agent_on(False); off.append(loop(n, model)); other_off.append(calls(n, other))
        agent_on(True); on.append(loop(n, model)); other_on.append(calls(n, other))
    print(json.dumps({"per_request_us": (min(on) - min(off)) * 1e6,
                      "bare_request_us": min(off) * 1e6,
                      "other_instance_call_us": (min(other_on) - min(other_off)) * 1e6}))
    """
)


def micro(tmp: str, source: str = MICRO) -> dict[str, float]:
    """Deterministic costs: agent work per step (hooks) and CPU per sampling tick."""
    script = Path(tmp) / "micro.py"
    script.write_text(source.replace("OFFLINE", os.path.join(tmp, "micro-off")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env["PYTHONPATH"] = str(ROOT)
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bound(costs: dict[str, float], step_s: float, hz: float) -> float:
    """Overhead bound in % of step time: per-step hook cost plus tick CPU at `hz`."""
    return 100 * (costs["per_step_us"] * 1e-6 / step_s + costs["tick_cpu_ms"] * 1e-3 * hz)


def main() -> int:
    """Run the interleaved benchmark and print/write the summary."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=",".join(LOOPS))
    parser.add_argument("--skip-micro", action="store_true", help="no breakdown, no A/B")
    parser.add_argument("--micro-only", action="store_true", help="only the cost breakdown")
    parser.add_argument("--blocks-only", action="store_true", help="only the in-process A/B")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "agent_overhead.json"))
    args = parser.parse_args()
    modes, workloads = args.modes.split(","), args.workloads.split(",")
    Runs = dict[str, list[dict[str, Any]]]
    results: dict[str, Runs] = {w: {m: [] for m in modes} for w in workloads}
    with tempfile.TemporaryDirectory() as tmp:
        costs = inference_costs = blocks = None
        if not args.skip_micro:
            costs = micro(tmp)
            inference_costs = micro(tmp, MICRO_INFERENCE)
            print(
                json.dumps({"micro": costs, "micro_inference": inference_costs}),
                file=sys.stderr,
                flush=True,
            )
        if args.micro_only:
            return 0
        if not args.skip_micro:
            blocks = {f"{hz}hz": run_blocks(tmp, ROOT, 1.0 / hz) for hz in (1, 10)}
        print(json.dumps({"blocks": blocks}), file=sys.stderr, flush=True)
        if args.blocks_only:
            return 0
        for round_ in range(args.runs):
            order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
            for workload in workloads:
                script = Path(tmp) / f"{workload}.py"
                script.write_text(LOOPS[workload])
                for mode in order:
                    offline = os.path.join(tmp, "off")
                    results[workload][mode].append(run_once(script, mode, args.steps, offline))
            print(f"round {round_ + 1}/{args.runs} done", file=sys.stderr, flush=True)
    first, *others = workloads
    summary = summarise(results[first], args.steps)  # the first workload at the top level
    summary["workload"] = first
    for workload in others:
        summary[workload] = summarise(results[workload], args.steps)
    if costs is not None and inference_costs is not None:
        summary["in_process_ab"] = blocks
        summary["micro_inference"] = {k: round(v, 4) for k, v in inference_costs.items()}
        step_s = summary["baseline"]["median_step_ms"] / 1e3
        summary["micro"] = {
            **{k: round(v, 4) for k, v in costs.items()},
            "bound_pct_1hz": round(bound(costs, step_s, 1.0), 4),
            "bound_pct_10hz": round(bound(costs, step_s, 10.0), 4),
        }
    summary["config"] = {
        "workloads": workloads,
        "runs": args.runs,
        "steps": args.steps,
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
