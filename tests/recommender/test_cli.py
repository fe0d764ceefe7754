"""`python -m perfweb_recommender analyze PATH`: the JSON shape, and one-line errors on bad
input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfweb_recommender", "analyze", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def _assert_one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_it_rejects_a_file_that_is_not_json(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text("this is not { json")
    _assert_one_line_error(_run(str(bad)), "not JSON")


def test_it_rejects_json_that_is_not_a_trace(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text(json.dumps({"hello": "world"}))
    _assert_one_line_error(_run(str(bad)), "not a Kineto trace")


def test_it_rejects_a_truncated_gzip(tmp_path: Path) -> None:
    whole = gzip.compress(json.dumps({"traceEvents": [{"ph": "X"}] * 1000}).encode())
    bad = tmp_path / "trace.json.gz"
    bad.write_bytes(whole[: len(whole) // 2])
    _assert_one_line_error(_run(str(bad)), "truncated gzip")


def test_it_rejects_a_missing_path(tmp_path: Path) -> None:
    _assert_one_line_error(_run(str(tmp_path / "nope")), "no such file")


def test_it_rejects_a_directory_without_traces(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    _assert_one_line_error(_run(str(tmp_path)), "neither a trace file")


def test_it_rejects_a_malformed_agent_batch(tmp_path: Path) -> None:
    agent = tmp_path / "run12345678" / "agent1234567"
    agent.mkdir(parents=True)
    (agent / "start.json").write_text(json.dumps({"run_id": "run12345678", "rank": 0}))
    (agent / "batch-00000000.json.gz").write_bytes(gzip.compress(b'{"metrics": [{"name": 3}]}'))
    _assert_one_line_error(_run(str(tmp_path)), "malformed")


def test_it_prints_the_documented_json_shape(peer: Path) -> None:
    result = _run(str(peer / "hta" / "trace_filter"), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["ranks"]) == {"0", "1"}
    rank0 = report["ranks"]["0"]
    assert set(rank0["temporal_breakdown"]) >= {
        "idle_pct",
        "compute_pct",
        "non_compute_pct",
        "idle_us",
        "compute_us",
        "non_compute_us",
        "kernel_span_us",
    }
    assert rank0["temporal_breakdown"]["idle_pct"] == pytest.approx(53.56, abs=0.01)
    assert rank0["comm_comp_overlap_pct"] == pytest.approx(11.81, abs=0.01)
    for key in ("idle_breakdown", "kernel_breakdown", "steps"):
        assert rank0[key]
    assert report["findings"]
    for item in report["findings"]:
        assert {"id", "title", "risk", "confidence", "estimated_gain", "evidence", "fix"} <= set(
            item
        )
    scores = [f["score"] for f in report["findings"]]
    assert scores == sorted(scores, reverse=True)


def test_it_prints_a_readable_text_report(peer: Path) -> None:
    result = _run(str(peer / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"))
    assert result.returncode == 0, result.stderr
    assert "rank 1" in result.stdout and "idle 46.1%" in result.stdout
    assert "Findings, best first:" in result.stdout


def test_a_trace_cut_anywhere_gives_one_line_and_exit_2(
    tmp_path: Path, peer: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfweb_recommender.cli import main

    whole = gzip.decompress((peer / "hta" / "trace_filter" / "sampled_rank-0.json.gz").read_bytes())
    for fraction in (0.001, 0.25, 0.5, 0.999):
        cut = tmp_path / f"cut-{fraction}.json"
        cut.write_bytes(whole[: int(len(whole) * fraction)])
        assert main(["analyze", str(cut)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ")


def test_every_peer_trace_is_analysed_without_error(peer: Path) -> None:
    from perfweb_recommender.api import analyze_path

    files = sorted((peer / "hta").rglob("*.json.gz"))
    assert len(files) >= 15
    for path in files:
        report = analyze_path(path)
        assert len(report.traces) == 1
        json.dumps(report.as_json())  # JSON-serialisable as it is


@pytest.mark.parametrize("missing", ["orjson", "msgspec", "numpy"])
def test_it_names_the_extra_to_install_when_the_recommender_extra_is_missing(
    missing: str, tmp_path: Path
) -> None:
    # As in an install with the agent extra only: the module cannot be imported.
    hide = (
        f"import runpy, sys; sys.modules[{missing!r}] = None; "
        "sys.argv = ['recommender', 'analyze', 'trace.json']; "
        "runpy.run_module('perfweb_recommender', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", hide], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"python -m perfweb_recommender needs the recommender extra ({missing} is missing): "
        "pip install 'perfweb[recommender]'"
    ]
