"""Reading an agent's offline directory (docs/protocol.md layout) into RunEvidence."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from perfweb_recommender.api import analyze_path
from perfweb_recommender.offline import find_runs, load_run

RUN = "run0123456789"


def _agent(root: Path, agent_id: str, start: dict, batches: list[dict]) -> Path:
    folder = root / RUN / agent_id
    folder.mkdir(parents=True)
    (folder / "start.json").write_text(json.dumps({"run_id": RUN, "agent_id": agent_id, **start}))
    for seq, body in enumerate(batches):
        (folder / f"batch-{seq:08d}.json.gz").write_bytes(gzip.compress(json.dumps(body).encode()))
    (folder / "finish.json").write_text(json.dumps({"run_id": RUN, "exit_code": 0}))
    return folder


def _steps(n: int, duration: float, wait: float) -> dict:
    return {
        "rank": 0,
        "index": list(range(n)),
        "t": [100.0 + i for i in range(n)],
        "duration": [duration] * n,
        "data_wait": [wait] * n,
    }


def _offline_dir(tmp_path: Path) -> Path:
    root = tmp_path / "offline"
    _agent(
        root,
        "launcher000001",
        {"role": "launcher", "rank": None, "started_at": 1.0, "facts": {"agent.role": "launcher"}},
        [
            {
                "metrics": [
                    {"device": "process", "name": "process.cpu_percent", "t": [1.0], "v": [1.0]}
                ]
            }
        ],
    )
    _agent(
        root,
        "worker0000001",
        {"role": "worker", "rank": None, "started_at": 2.0, "facts": {"agent.role": "worker"}},
        [
            {
                "facts": {"dataloader.0.num_workers": 0, "host.usable_cores": 8},
                "metrics": [
                    {
                        "device": "process",
                        "name": "process.cpu_percent",
                        "t": [2.0, 3.0],
                        "v": [99.0, 98.0],
                    }
                ],
                "steps": _steps(20, 0.1, 0.06),
            },
            {
                "facts": {"dataloader.0.num_workers": 0, "threads.intra_op": 1},
                "steps": _steps(20, 0.1, 0.06),
            },
        ],
    )
    return root


def test_it_merges_every_agent_of_the_run(tmp_path: Path) -> None:
    runs = find_runs(_offline_dir(tmp_path))
    assert [r.run_id for r in runs] == [RUN]
    evidence, traces = load_run(runs[0])
    assert traces == []
    assert evidence.facts["agent.role"] == "worker"  # workers' facts win over the launcher's
    assert evidence.facts["threads.intra_op"] == 1
    assert len(evidence.steps) == 40
    # the launcher's own process is not the job's: its process series is left out
    assert evidence.values("process.cpu_percent") == [99.0, 98.0]


def test_it_diagnoses_an_offline_directory(tmp_path: Path) -> None:
    report = analyze_path(_offline_dir(tmp_path))
    assert report.run_id == RUN
    assert report.findings[0].id == "dataloader.num_workers"


def test_it_accepts_one_run_directory_and_analyses_its_traces(tmp_path: Path, peer: Path) -> None:
    root = _offline_dir(tmp_path)
    traces = root / RUN / "worker0000001" / "traces"
    traces.mkdir()
    shutil.copy(
        peer / "hta" / "trace_filter" / "sampled_rank-0.json.gz", traces / "w.pt.trace.json.gz"
    )
    report = analyze_path(root / RUN)
    assert [t.rank for t in report.traces] == [0]
    assert report.as_json()["ranks"]["0"]["temporal_breakdown"]["idle_pct"] == 53.56
