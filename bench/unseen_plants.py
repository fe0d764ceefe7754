"""Planted-cause scripts the rules were not written against, run quiet and beside busy work.

    python bench/unseen_plants.py [--scripts bench/unseen] [--only p1,c2]
                                  [--out bench/results/unseen_plants.json]

Each script in bench/unseen/ plants one cause (or none: the `c*` controls; `d1` is a
single-host 2-rank gloo job). The scripts were written from docs/FIXES-style descriptions of
the causes only, before reading the rules or the planted-cause tests. Per script the bench
runs it bare once (the reference exit code and stdout), then attached with
`perf-agent attach --offline` twice: quiet, and with two `while True: pass` processes beside
it (started and ended here, by pid). Each attached run is analysed
(`python -m perfweb_recommender analyze`, text and JSON) and records: the top workload fix
(id, estimated gain, basis: replayed / measured / prior / critical), whether it is the planted
cause, the host conditions (risk `system`) apart, any critical finding, the steps or requests
counted against what the script printed it ran, and whether the exit code and stdout (timings
masked) equal the bare run's. Writes the JSON and prints a table.

Pass criteria (issue 32): a planted script's cause is the top workload fix in both runs; no
control has a workload finding with an estimated gain >= 10%; no critical on the 2-rank job.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import public_scripts as ps  # bench/ is on sys.path as a script: its analyze()

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
PERF_AGENT = str(Path(PY).parent / "perf-agent")
TIMEOUT_S = 600
CONTROL_GAIN_LIMIT = 0.10

# name -> the ids that count as the planted cause (first = the one planted), and the regex
# whose first group is the number of steps / requests the script says it ran.
CASES: dict[str, dict[str, Any]] = {
    "p1_augment_loader": {
        "cause": ["dataloader.num_workers", "dataloader.cpu_bound"],
        "ran": r"steps=(\d+)",
        "what": "numpy per-sample augmentation, DataLoader num_workers=0, plain loop",
    },
    "p2_remote_store_trainer": {
        "cause": ["dataloader.io_wait", "dataloader.num_workers"],
        "ran": r"(\d+) steps",
        "what": "class-based Trainer; dataset sleeps 12 ms per record (remote store)",
    },
    "p3_many_small_params": {
        "cause": ["optimizer.foreach"],
        "ran": r"(\d+) steps",
        "what": "580 small parameter tensors, Adam(foreach=False)",
    },
    "p4_grad_accum_bug": {
        "cause": ["training.accumulation_discarded"],
        "ran": r"updates=(\d+)",
        "what": "zero_grad() inside a 4-micro-step accumulation loop",
    },
    "p5_serve_autograd": {
        "cause": ["inference.autograd_enabled"],
        "ran": r"served (\d+) requests",
        "what": "queue-fed serving loop, eval() without no_grad/inference_mode",
    },
    "p6_manual_attention": {
        "cause": ["attention.fused"],
        "ran": r"step (\d+) loss",
        "what": "tiny encoder, T=512, matmul-softmax-matmul attention",
    },
    "p7_greedy_decode": {
        "cause": ["inference.kv_cache"],
        "ran": r"\((\d+) decode steps\)",
        "what": "greedy decode re-running the whole prefix per token (no KV cache)",
    },
    "p8_single_thread": {
        "cause": ["cpu.threads_too_few"],
        "ran": r"\((\d+) steps\)\s*$",
        "what": "matmul-heavy MLP with torch.set_num_threads(1) on 2 cores",
    },
    "c1_healthy_train": {"cause": [], "ran": r"(\d+) steps", "what": "healthy training"},
    "c2_healthy_serve": {
        "cause": [],
        "ran": r"served (\d+) samples",
        "per_request": 64,
        "what": "healthy batched serving under inference_mode",
    },
    "d1_ddp_gloo": {
        "cause": [],
        "ran": r"done (\d+) steps",
        "distributed": True,
        "what": "2 ranks, DDP over gloo, mp.spawn, one host",
    },
}

BUSY = "while True: pass"


def _mask(text: str) -> str:
    return re.sub(r"\d+\.\d+s\b", "<t>s", text)


def _run(script: Path, *, agent_dir: Path | None) -> dict[str, Any]:
    cmd = [PY, str(script)]
    if agent_dir is not None:
        cmd = [PERF_AGENT, "attach", "--offline", str(agent_dir), "--", *cmd]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=script.parent, capture_output=True, text=True, env=env, timeout=TIMEOUT_S
        )
        rc, out = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as exc:
        rc, out = 124, (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else ""
    return {"rc": rc, "wall_s": round(time.perf_counter() - start, 1), "stdout": out}


def _basis(finding: dict[str, Any]) -> str:
    if finding.get("critical"):
        return "critical"
    if finding.get("prior"):
        return "prior"
    text = (finding.get("gain_basis") or "").lower()
    return "replayed" if "replay" in text else "measured"


def _brief(finding: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": finding.get("id"),
        "gain": finding.get("estimated_gain"),
        "basis": _basis(finding),
        "gain_basis": finding.get("gain_basis"),
        "critical": bool(finding.get("critical")),
    }


def _summary(report: dict[str, Any], case: dict[str, Any], ran: int | None) -> dict[str, Any]:
    run = report.get("run") or {}
    findings = [_brief(f) for f in report.get("findings") or []]
    host = [_brief(f) for f in report.get("host_conditions") or []]
    counted = run.get("requests") if run.get("kind") == "inference" else run.get("steps")
    if run.get("kind") == "inference" and counted is None:
        counted = (run.get("served") or {}).get("requests")
    top = findings[0] if findings else None
    criticals = [f["id"] for f in findings + host if f["critical"]]
    summary: dict[str, Any] = {
        "kind": run.get("kind"),
        "steps_source": run.get("steps_source"),
        "counted": counted,
        "ran": ran,
        "ranks": run.get("ranks"),
        "top": top,
        "findings": findings,
        "host_conditions": host,
        "criticals": criticals,
    }
    if case["cause"]:
        summary["right"] = bool(top and top["id"] in case["cause"])
    else:
        big = [f for f in findings if (f["gain"] or 0) >= CONTROL_GAIN_LIMIT or f["critical"]]
        summary["right"] = not big if not case.get("distributed") else not criticals
        summary["over_limit"] = [f["id"] for f in big]
    return summary


def _ran(case: dict[str, Any], stdout: str) -> int | None:
    found = re.findall(case["ran"], stdout, flags=re.MULTILINE)
    if not found:
        return None
    return int(found[-1]) // case.get("per_request", 1)


def _busy_start() -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["python3", "-c", BUSY]) for _ in range(2)]


def _busy_stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def bench_script(script: Path, work: Path) -> dict[str, Any]:
    """Bare once, then attached quiet and busy; each attached run analysed."""
    case = CASES[script.stem]
    bare = _run(script, agent_dir=None)
    result: dict[str, Any] = {
        "script": script.name,
        "what": case["what"],
        "planted": case["cause"][0] if case["cause"] else None,
        "bare": {"rc": bare["rc"], "wall_s": bare["wall_s"]},
    }
    for arm in ("quiet", "busy"):
        agent_dir = work / f"{script.stem}-{arm}"
        busy = _busy_start() if arm == "busy" else []
        try:
            attached = _run(script, agent_dir=agent_dir)
        finally:
            _busy_stop(busy)
        report, text = ps.analyze(agent_dir)
        summary = _summary(report, case, _ran(case, attached["stdout"]))
        summary.update(
            rc=attached["rc"],
            wall_s=attached["wall_s"],
            same_rc=attached["rc"] == bare["rc"],
            same_stdout=_mask(attached["stdout"]) == _mask(bare["stdout"]),
            report_text=text,
        )
        if report.get("error"):
            summary["error"] = report["error"]
        result[arm] = summary
        print(json.dumps({"script": script.name, "arm": arm, **_row(summary)}), flush=True)
    return result


def _row(s: dict[str, Any]) -> dict[str, Any]:
    top = s.get("top") or {}
    return {
        "top": top.get("id"),
        "gain": top.get("gain"),
        "basis": top.get("basis"),
        "right": s.get("right"),
        "counted": s.get("counted"),
        "ran": s.get("ran"),
        "host": [f["id"] for f in s.get("host_conditions") or []],
        "criticals": s.get("criticals"),
    }


def _cell(s: dict[str, Any]) -> str:
    top = s.get("top")
    if not top:
        return "none"
    gain = top["gain"]
    pct = f" {gain:.0%}" if isinstance(gain, (int, float)) and gain else ""
    return f"{top['id']}{pct} ({top['basis']})"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| script | planted | quiet top fix | busy top fix | right q/b | counted/ran q, b "
        "| same rc+stdout q/b |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        q, b = r["quiet"], r["busy"]
        yn = {True: "yes", False: "NO", None: "?"}
        lines.append(
            f"| {r['script']} | {r['planted'] or '(control)'} | {_cell(q)} | {_cell(b)} | "
            f"{yn[q['right']]}/{yn[b['right']]} | {q['counted']}/{q['ran']}, "
            f"{b['counted']}/{b['ran']} | "
            f"{yn[q['same_rc'] and q['same_stdout']]}/{yn[b['same_rc'] and b['same_stdout']]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", type=Path, default=ROOT / "bench/unseen")
    parser.add_argument("--only", default="", help="comma-separated name prefixes")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/unseen_plants.json")
    args = parser.parse_args()
    only = [p for p in args.only.split(",") if p]
    scripts = [
        args.scripts / f"{name}.py"
        for name in CASES
        if not only or any(name.startswith(p) for p in only)
    ]
    results = []
    with tempfile.TemporaryDirectory(prefix="unseen-") as tmp:
        for script in scripts:
            results.append(bench_script(script, Path(tmp)))
    out = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
