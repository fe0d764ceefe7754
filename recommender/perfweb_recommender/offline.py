"""Read an agent's offline directory (docs/protocol.md) into `RunEvidence`.

```
DIR/<run_id>/<agent_id>/start.json
DIR/<run_id>/<agent_id>/batch-NNNNNNNN.json.gz
DIR/<run_id>/<agent_id>/finish.json
DIR/<run_id>/<agent_id>/traces/<name>.pt.trace.json.gz
```
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from perfweb_contract.layout import BATCH_RE, FINISH_FILE, START_FILE, TRACES_DIR
from perfweb_recommender.analysis.summary import TraceSummary, summarize
from perfweb_recommender.errors import InputError
from perfweb_recommender.evidence import ProcessSeen, RunEvidence, Series, StepSample
from perfweb_recommender.replay.plan import plan_for
from perfweb_recommender.run_end import worker_name
from perfweb_recommender.trace.loader import load_trace

_LAUNCHER_ONLY_DEVICES = ("process", "workers")  # the launcher's own process is not the job's


@dataclass
class OfflineRun:
    """One run found in an offline directory."""

    run_id: str
    path: Path
    started_at: float
    agents: list[Path] = field(default_factory=list)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        body = orjson.loads(raw)
    except (OSError, EOFError, zlib.error, orjson.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable agent file ({exc})") from None
    if not isinstance(body, dict):
        raise InputError(f"{path}: not a JSON object")
    return body


def is_agent_dir(path: Path) -> bool:
    """Whether `path` holds one agent's files (a start.json)."""
    return (path / START_FILE).is_file()


def find_runs(root: Path) -> list[OfflineRun]:
    """Runs under an offline directory (`root` may also be one run's directory)."""
    candidates = [root] if any(is_agent_dir(p) for p in _subdirs(root)) else _subdirs(root)
    runs = []
    for run_dir in candidates:
        agents = [p for p in _subdirs(run_dir) if is_agent_dir(p)]
        if not agents:
            continue
        started = min(float(_read_json(a / START_FILE).get("started_at") or 0.0) for a in agents)
        runs.append(
            OfflineRun(run_id=run_dir.name, path=run_dir, started_at=started, agents=agents)
        )
    return sorted(runs, key=lambda r: r.started_at)


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def _batches(agent: Path) -> list[dict[str, Any]]:
    files = [(int(m.group(1)), p) for p in agent.iterdir() if (m := BATCH_RE.match(p.name))]
    return [_read_json(p) for _, p in sorted(files)]


def _steps(body: dict[str, Any], default_rank: int) -> list[StepSample]:
    steps = body.get("steps")
    if not isinstance(steps, dict):
        return []
    rank = steps.get("rank", default_rank)
    rank = int(rank) if isinstance(rank, int) else default_rank
    index, t, duration = steps.get("index", []), steps.get("t", []), steps.get("duration", [])
    wait = steps.get("data_wait") or [None] * len(index)
    return [
        StepSample(rank=rank, index=int(i), t=float(ti), duration_s=float(d), data_wait_s=w)
        for i, ti, d, w in zip(index, t, duration, wait, strict=False)
    ]


def _agent_order(start: dict[str, Any]) -> tuple[int, int]:
    """Launchers first, then workers by rank: later facts win."""
    return (0 if start.get("role") == "launcher" else 1, int(start.get("rank") or 0))


def load_run(run: OfflineRun) -> tuple[RunEvidence, list[TraceSummary]]:
    """All agents of one run merged into a RunEvidence (traces analysed, rank-tagged)."""
    evidence = RunEvidence()
    agents = sorted(
        ((a, _read_json(a / START_FILE)) for a in run.agents), key=lambda x: _agent_order(x[1])
    )
    for agent, start in agents:
        rank = int(start.get("rank") or 0)
        launcher = start.get("role") == "launcher"
        evidence.processes.append(_process_seen(start))
        command = start.get("command")
        if not evidence.command and isinstance(command, list):  # the launcher's comes first
            evidence.command = [str(part) for part in command]
        evidence.facts.update(start.get("facts") or {})
        evidence.devices += [d for d in start.get("devices") or [] if isinstance(d, dict)]
        if isinstance(start.get("world_size"), int):
            evidence.world_size = start["world_size"]
        for seq, body in enumerate(_batches(agent)):
            try:
                _add_batch(evidence, body, rank, launcher)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise InputError(f"{agent}: batch #{seq} is malformed ({exc!r})") from None
        evidence.traces += _agent_traces(agent, rank)
    _read_ending(evidence, agents)
    evidence.relabel_pre_training_calls()
    evidence.devices = list({d.get("key", i): d for i, d in enumerate(evidence.devices)}.values())
    return evidence, evidence.traces


def _process_seen(start: dict[str, Any]) -> ProcessSeen:
    def number(key: str) -> int | None:
        value = start.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return ProcessSeen(
        host=str(start.get("host") or ""),
        role=str(start.get("role") or ""),
        rank=number("rank"),
        local_rank=number("local_rank"),
    )


def _read_ending(evidence: RunEvidence, agents: list[tuple[Path, dict[str, Any]]]) -> None:
    """How the run ended, where its launcher finished: the exit status, and every worker
    whose agent left no finish.json (killed before it could flush: `ended_early`). Without a
    launcher's finish (the in-script API, or a run still going) nothing is claimed."""
    launcher = [a for a, start in agents if start.get("role") == "launcher"]
    finished = [a for a in launcher if (a / FINISH_FILE).is_file()]
    if not finished:
        return
    code = _read_json(finished[0] / FINISH_FILE).get("exit_code")
    evidence.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    workers = [(a, start) for a, start in agents if start.get("role") != "launcher"]
    evidence.silent_agents += [
        worker_name(start.get("rank"), workers=len(workers))
        for agent, start in workers
        if not (agent / FINISH_FILE).is_file()
    ]


def _add_batch(evidence: RunEvidence, body: dict[str, Any], rank: int, launcher: bool) -> None:
    evidence.facts.update(body.get("facts") or {})
    evidence.devices += [d for d in body.get("devices") or [] if isinstance(d, dict)]
    evidence.steps += _steps(body, rank)
    for metric in body.get("metrics") or []:
        if launcher and metric.get("device") in _LAUNCHER_ONLY_DEVICES:
            continue
        values = [float(v) for v in metric["v"]]
        evidence.series.append(
            Series(
                str(metric["device"]), str(metric["name"]), [float(t) for t in metric["t"]], values
            )
        )


def _agent_traces(agent: Path, rank: int) -> list[TraceSummary]:
    folder = agent / TRACES_DIR
    if not folder.is_dir():
        return []
    summaries = []
    for path in sorted(folder.glob("*.json*")):
        trace = load_trace(path, fallback_rank=rank)
        trace.rank = rank
        summary = summarize(trace)
        summary.replay_plan = plan_for(summary, path)
        summaries.append(summary)
    return summaries
