"""The kit's stages: probe the machine, diagnose each workload, measure the agent's overhead,
A/B two knobs. Each returns a JSON-ready dict with a `status` (ok / failed / skipped) and never
raises for a failing workload: the next stage still runs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.gpu import procs
from bench.gpu.expectations import AbPair, Expectation
from bench.gpu.nvml_check import check_offline
from bench.gpu.overhead import MODES, run_order, summarise_overhead, window_of
from bench.gpu.wheels import package_paths, recommender_env

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKLOADS = HERE / "workloads.py"
ANALYSIS_S = 30.0  # bound on one `python -m perfweb_recommender analyze` (a few small traces)
RESERVE_S = 15.0  # kept back from every stage for writing the report


class Budget:
    """The kit's total time: what is left, and whether a stage of a given cost still fits."""

    def __init__(self, total_s: float, *, clock: Any = time.monotonic) -> None:
        self.total_s = total_s
        self._clock = clock
        self._start = clock()

    def left(self) -> float:
        """Seconds left before the report must be written."""
        return self.total_s - (self._clock() - self._start) - RESERVE_S

    def allows(self, cost_s: float) -> bool:
        """Whether a stage estimated at `cost_s` fits in what is left."""
        return self.left() >= cost_s

    def timeout(self, bound_s: float) -> float:
        """A command's timeout: its own bound, cut to what is left."""
        return max(1.0, min(bound_s, self.left()))


@dataclass
class Config:
    """How the kit runs: device, sizes, bounds and where things go."""

    device: str = "cuda"
    smoke: bool = False
    work: Path = Path("/tmp/perfweb-gpu-check")
    python: str = sys.executable
    startup_s: float = 12.0  # estimate: interpreter + torch + CUDA context + agent
    min_steps: int = 60
    min_seconds: float = 8.0
    max_seconds: float = 25.0
    idle_seconds: float = 20.0
    profile_warmup_steps: int = 30
    overhead_rounds: int = 3
    overhead_steps: int = 400
    ab_rounds: int = 3
    ab_steps: int = 20
    ab_warmup: int = 5
    recommender: dict[str, Any] = field(default_factory=lambda: {"ok": True, "site": None})
    gpm_supported: bool | None = None

    @classmethod
    def smoke_on(cls, device: str, work: Path) -> Config:
        """Tiny everything: a few steps of each workload, one overhead round and two A/B
        rounds (the fewest an interval needs)."""
        return cls(
            device=device,
            smoke=True,
            work=work,
            startup_s=4.0,
            min_steps=8,
            min_seconds=0.0,
            max_seconds=20.0,
            idle_seconds=0.5,
            profile_warmup_steps=3,
            overhead_rounds=1,
            overhead_steps=30,
            ab_rounds=2,
            ab_steps=3,
            ab_warmup=1,
        )


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without agent settings, with the repo importable
    by its import names (nothing is installed on the GPU machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    paths = (*package_paths(REPO), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def workload_argv(cfg: Config, name: str, **bounds: float | Path) -> list[str]:
    """The command that runs one workload (bounds: min_steps, max_seconds, result, ...)."""
    argv = [cfg.python, str(WORKLOADS), name, "--device", cfg.device]
    if cfg.smoke:
        argv.append("--smoke")
    for key, value in bounds.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def attach_argv(
    cfg: Config, offline: Path, *, name: str, interval: float | None = None, profile: bool = True
) -> list[str]:
    """`perf-agent attach --offline` (through `python -m perfweb_agent.cli.main`: nothing
    installed)."""
    argv = [
        cfg.python,
        "-m",
        "perfweb_agent.cli.main",
        "attach",
        "--offline",
        str(offline),
        "--name",
        name,
    ]
    if interval is not None:
        argv += ["--interval", str(interval)]
    if not profile:
        argv.append("--no-profile")
    return [*argv, "--"]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def skipped(reason: str, **extra: Any) -> dict[str, Any]:
    """A stage that did not run."""
    return {"status": "skipped", "error": reason, **extra}


# ---------------------------------------------------------------------------------- probe
PROBE = """
import json, platform, sys
info = {"python": sys.version.split()[0], "platform": platform.platform()}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda_available"] = torch.cuda.is_available()
    if info["cuda_available"]:
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, capability=f"{p.major}.{p.minor}", memory_total=p.total_memory,
                    sm_count=p.multi_processor_count, cuda=torch.version.cuda)
except Exception as e:
    info["torch_error"] = repr(e)
try:
    from perfweb_agent.collectors.nvml import real_query
    q = real_query()
    q("init")
    info["nvml_driver"] = q("driver_version")
    info["nvml_gpus"] = q("device_count")
    h = q("handle", 0)
    try:
        info["gpm_supported"] = bool(q("gpm_supported", h))
    except Exception as e:
        info["gpm_supported"] = False
        info["gpm_error"] = repr(e)
    for op in ("power_limit", "mig_mode"):
        try:
            info[op] = q(op, h)
        except Exception as e:
            info[op + "_error"] = repr(e)
except Exception as e:
    info["nvml_error"] = repr(e)
try:
    import psutil
    info["psutil"] = psutil.__version__
except ImportError:
    info["psutil"] = None
import os
info["cpu_count"] = os.cpu_count()
print(json.dumps(info))
"""


def probe(cfg: Config, budget: Budget) -> dict[str, Any]:
    """What this machine is: Python, torch, the GPU, NVML, GPM support (in a child process,
    so the kit itself never initialises CUDA)."""
    out = cfg.work / "probe.json"
    ran = procs.run(
        [cfg.python, "-c", PROBE],
        log=cfg.work / "probe.log",
        stdout=out,
        timeout_s=budget.timeout(60.0),
        env=base_env(),
    )
    info = _read_json(out) if ran.ok else None
    if info is None:
        return {"status": "failed", "error": ran.why(), "wall_s": round(ran.wall_s, 2)}
    return {"status": "ok", "wall_s": round(ran.wall_s, 2), **info}


def calibrate(cfg: Config, probe_result: dict[str, Any]) -> None:
    """Cost estimates from the probe: it imported torch and asked CUDA for the device, about
    what every workload's start-up costs (never below 3 s; a fixed guess when it failed)."""
    wall = probe_result.get("wall_s")
    if probe_result.get("status") == "ok" and isinstance(wall, (int, float)):
        cfg.startup_s = max(3.0, float(wall) + 2.0)


# ---------------------------------------------------------------------------------- diagnose
def diagnose(cfg: Config, budget: Budget, expectation: Expectation) -> dict[str, Any]:
    """Run one workload under the offline agent, analyse it, check its NVML series."""
    name = expectation.workload
    idle = cfg.idle_seconds if name == "idle_held" else 0.0
    cost = cfg.startup_s + cfg.min_seconds + idle + 5.0
    if not budget.allows(cost):
        return skipped(f"time budget: {budget.left():.0f} s left, needs ~{cost:.0f} s")
    folder = cfg.work / name
    offline, result_path = folder / "offline", folder / "result.json"
    env = base_env(
        {
            "PERF_AGENT_PROFILE_WARMUP_STEPS": str(cfg.profile_warmup_steps),
            "PERF_AGENT_PROFILE_STEPS": "5",
        }
    )
    argv = attach_argv(cfg, offline, name=name, interval=1.0) + workload_argv(
        cfg,
        name,
        min_steps=cfg.min_steps,
        min_seconds=cfg.min_seconds,
        max_seconds=cfg.max_seconds,
        idle_seconds=idle or cfg.idle_seconds,
        result=result_path,
    )
    ran = procs.run(
        argv,
        log=folder / "run.log",
        env=env,
        timeout_s=budget.timeout(cfg.startup_s + cfg.max_seconds + idle + 30.0),
    )
    report: dict[str, Any] = {
        "status": "ok" if ran.ok else "failed",
        "wall_s": round(ran.wall_s, 2),
    }
    if not ran.ok:
        report["error"] = ran.why()
    report["workload"] = _workload_summary(_read_json(result_path))
    duration = (report["workload"] or {}).get("wall_s") or ran.wall_s
    report["nvml"] = check_offline(
        offline,
        duration_s=float(duration),
        busy=expectation.busy,
        gpm_supported=cfg.gpm_supported,
    )
    report["analysis"] = analyse(cfg, budget, offline, folder)
    kernels = [
        (rank.get("launch") or {}).get("kernels") or 0
        for rank in (report["analysis"].get("ranks") or {}).values()
    ]
    report["kernels"] = (
        top_kernels(cfg, budget, offline, folder)
        if any(kernels) or report["analysis"].get("status") != "ok"
        else skipped("no GPU kernels in the analysed traces")
    )
    return report


def _workload_summary(result: dict[str, Any] | None) -> dict[str, Any] | None:
    if result is None:
        return None
    steps = result.get("step_s") or []
    steady = steps[len(steps) // 5 :] or steps
    return {
        "steps": result.get("steps"),
        "device": result.get("device"),
        "wall_s": round(float(result.get("wall_s") or 0.0), 3),
        "median_step_ms": round(statistics.median(steady) * 1e3, 4) if steady else None,
        "gpu": result.get("gpu"),
        "max_memory_allocated": result.get("max_memory_allocated"),
    }


def analyse(cfg: Config, budget: Budget, offline: Path, folder: Path) -> dict[str, Any]:
    """`python -m perfweb_recommender analyze OFFLINE --format json`, compacted for the report."""
    if not cfg.recommender.get("ok"):
        return skipped(f"recommender unavailable: {cfg.recommender.get('reason')}")
    if not offline.is_dir():
        return skipped("the workload left no offline directory")
    out = folder / "analysis.json"
    ran = procs.run(
        [cfg.python, "-m", "perfweb_recommender", "analyze", str(offline), "--format", "json"],
        log=folder / "analysis.log",
        stdout=out,
        timeout_s=budget.timeout(ANALYSIS_S),
        env=recommender_env(cfg.recommender.get("site"), REPO),
    )
    body = _read_json(out) if ran.ok else None
    if body is None:
        return {"status": "failed", "error": ran.why()}
    return {"status": "ok", **compact_analysis(body)}


def compact_analysis(body: dict[str, Any]) -> dict[str, Any]:
    """The parts of the analyze JSON the report shows: ranked ids and the classification."""
    findings = [
        {k: f.get(k) for k in ("id", "score", "estimated_gain", "confidence", "risk", "title")}
        for f in body.get("findings") or []
    ]
    ranks = {}
    for key, rank in (body.get("ranks") or {}).items():
        launch = rank.get("launch") or {}
        ranks[key] = {
            "temporal_breakdown": rank.get("temporal_breakdown"),
            "kernel_breakdown": rank.get("kernel_breakdown"),
            "tensor_cores": rank.get("tensor_cores"),
            "memcpy": rank.get("memcpy"),
            "step_shares": rank.get("step_shares"),
            "steps": len(rank.get("steps") or []),
            "launch": {
                k: launch.get(k) for k in ("kernels", "short_kernel_share", "median_kernel_us")
            },
            "sync_points": rank.get("sync_points"),
            "allocator": rank.get("allocator"),
        }
    return {
        "findings": findings,
        "run": body.get("run") or {},
        "ranks": ranks,
        "notes": body.get("notes") or [],
    }


def top_kernels(cfg: Config, budget: Budget, offline: Path, folder: Path) -> dict[str, Any]:
    """The heaviest kernels of each trace with the recommender's classes (`bench.gpu.kernels`)."""
    if not cfg.recommender.get("ok") or not any(offline.rglob("*.pt.trace.json*")):
        return skipped("no trace" if cfg.recommender.get("ok") else "recommender unavailable")
    out = folder / "kernels.json"
    ran = procs.run(
        [cfg.python, "-m", "bench.gpu.kernels", str(offline)],
        log=folder / "kernels.log",
        stdout=out,
        timeout_s=budget.timeout(ANALYSIS_S),
        env=recommender_env(cfg.recommender.get("site"), REPO),
    )
    body = _read_json(out) if ran.ok else None
    if body is None:
        return {"status": "failed", "error": ran.why()}
    return {"status": "ok", "traces": body}


# ---------------------------------------------------------------------------------- overhead
def overhead(cfg: Config, budget: Budget, *, keep_s: float = 0.0) -> dict[str, Any]:
    """The healthy loop without the agent, at 1 Hz, at 10 Hz, and at 10 Hz with one profiler
    window, interleaved (the order rotates each round), as many rounds as the budget allows
    while keeping `keep_s` for the stages after it."""
    warm = cfg.profile_warmup_steps if cfg.smoke else cfg.overhead_steps // 2
    per_run = cfg.startup_s + 5.0
    runs: list[dict[str, Any]] = []
    errors: list[str] = []
    stopped = ""
    for number in range(cfg.overhead_rounds):
        if not budget.allows(per_run * len(MODES) + keep_s):
            stopped = f"rounds {number + 1}+ skipped: time budget ({budget.left():.0f} s left)"
            break
        for mode in run_order(number):
            measured = _overhead_run(cfg, budget, mode, number, warm)
            if "error" in measured:
                errors.append(measured["error"])
            else:
                runs.append(measured)
    if not runs:
        failed = "; ".join(errors)
        return {"status": "failed" if errors else "skipped", "error": failed or stopped}
    errors += [stopped] if stopped else []
    summary = summarise_overhead(runs, window=window_of(warm))
    return {"status": "ok", "steps_per_run": cfg.overhead_steps, "errors": errors, **summary}


def _overhead_run(cfg: Config, budget: Budget, mode: str, number: int, warm: int) -> dict:
    folder = cfg.work / "overhead" / f"{number}-{mode}"
    result_path = folder / "result.json"
    workload = workload_argv(
        cfg,
        "healthy_bf16",
        min_steps=cfg.overhead_steps,
        max_steps=cfg.overhead_steps,
        min_seconds=0,
        max_seconds=cfg.max_seconds,
        result=result_path,
    )
    settings = MODES[mode]
    env = base_env()
    argv = workload
    if settings is not None:
        argv = (
            attach_argv(
                cfg,
                folder / "offline",
                name=f"overhead-{mode}",
                interval=settings.interval,
                profile=settings.profile,
            )
            + workload
        )
        env.update(PERF_AGENT_PROFILE_WARMUP_STEPS=str(warm), PERF_AGENT_PROFILE_STEPS="5")
    ran = procs.run(
        argv,
        log=folder / "run.log",
        env=env,
        timeout_s=budget.timeout(cfg.startup_s + cfg.max_seconds + 20.0),
    )
    result = _read_json(result_path) if ran.ok else None
    if result is None:
        return {"error": f"{mode} round {number + 1}: {ran.why()}"}
    return {"mode": mode, "round": number, "step_s": result["step_s"], "wall_s": ran.wall_s}


# ---------------------------------------------------------------------------------- A/B
def ab_cost(cfg: Config) -> float:
    """Estimated seconds of one A/B: rounds x 2 arms x (start-up + a few seconds of steps)."""
    return cfg.ab_rounds * 2 * (cfg.startup_s + 3.0)


def ab(cfg: Config, budget: Budget, pair: AbPair) -> dict[str, Any]:
    """`perf-agent ab --knob K` on the workload whose plant K fixes; speed-up and its CI."""
    base = {"knob": pair.knob, "workload": pair.workload, "finding": pair.finding}
    cost = ab_cost(cfg)
    if not budget.allows(cost):
        return skipped(f"time budget: {budget.left():.0f} s left, needs ~{cost:.0f} s", **base)
    folder = cfg.work / f"ab-{pair.workload}"
    out = folder / "ab.json"
    # The engine adds rounds while its interval is too wide to decide; the kit's time budget
    # is fixed, so it asks for exactly its rounds (an undecided result says inconclusive).
    argv = [
        cfg.python,
        "-m",
        "perfweb_agent.cli.main",
        "ab",
        "--knob",
        pair.knob,
        "--rounds",
        str(cfg.ab_rounds),
        "--max-rounds",
        str(cfg.ab_rounds),
        "--time-budget",
        f"{cost:.0f}",
        "--steps",
        str(cfg.ab_steps),
        "--warmup",
        str(cfg.ab_warmup),
        "--format",
        "json",
        "--quiet",
        "--",
        *workload_argv(
            cfg,
            pair.workload,
            min_steps=cfg.ab_steps + cfg.ab_warmup + 1000,
            min_seconds=0,
            max_seconds=cfg.max_seconds,
        ),
    ]
    ran = procs.run(
        argv,
        log=folder / "ab.log",
        stdout=out,
        env=base_env(),
        timeout_s=budget.timeout(cost * 2 + 30.0),
    )
    body = _read_json(out) if ran.ok else None
    if body is None:
        return {"status": "failed", "error": ran.why(), **base}
    keys = (
        "speedup",
        "ci_low",
        "ci_high",
        "verdict",
        "baseline_step_s",
        "candidate_step_s",
        "baseline_median_s",
        "candidate_median_s",
        "rounds",
        "steps_per_arm",
        "loss_parity",
    )
    return {
        "status": "ok",
        **base,
        "wall_s": round(ran.wall_s, 1),
        **{k: body.get(k) for k in keys},
    }
