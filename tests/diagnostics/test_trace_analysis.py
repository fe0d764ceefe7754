"""A trace that arrives is analysed once, cached on its row, and feeds the diagnosis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfweb.diagnostics.models import Finding, RunDiagnosis, Trace
from perfweb.diagnostics.services import trace_analyse
from perfweb.diagnostics.summaries import summary_from_json, summary_to_json
from perfweb.runs.models import Run
from perfweb_recommender.analysis.summary import summarize
from perfweb_recommender.api import analyze_evidence
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.trace.loader import load_trace
from tests.server.agent_client import Agent

from .conftest import NS_TRACE, input_bound_run, trace_bytes, upload

pytestmark = pytest.mark.django_db
needs_peer_trace = pytest.mark.skipif(not NS_TRACE.is_file(), reason="no shared/peer-traces")


@needs_peer_trace
def test_it_analyses_an_hta_trace_uploaded_through_the_endpoint(
    started: Agent, django_capture_on_commit_callbacks: Any
) -> None:
    data = NS_TRACE.read_bytes()
    with django_capture_on_commit_callbacks(execute=True) as enqueued:
        replies = upload(started, data, name="rank-0", chunk_bytes=256 * 1024)
    assert replies[-1].json()["complete"] is True and len(replies) == 5
    assert len(enqueued) == 1  # the complete trace enqueued one diagnosis (run eagerly)
    trace = Trace.objects.get()
    assert trace.analysis_error == "" and trace.analysed_at is not None
    expected = summarize(load_trace(NS_TRACE))
    stored = summary_from_json(trace.summary)
    assert stored.temporal == expected.temporal
    assert {**stored.as_json(), "source": ""} == {**expected.as_json(), "source": ""}
    assert stored.source.endswith("/traces/rank-0.pt.trace.json.gz")  # the stored copy
    assert RunDiagnosis.objects.get(run=trace.run).diagnosed_at is not None


@needs_peer_trace
def test_a_stored_summary_diagnoses_like_a_fresh_one() -> None:
    fresh = summarize(load_trace(NS_TRACE))
    stored = summary_from_json(summary_to_json(fresh))
    as_json = [f.as_json() for f in analyze_evidence(RunEvidence(traces=[fresh])).findings]
    again = [f.as_json() for f in analyze_evidence(RunEvidence(traces=[stored])).findings]
    assert again == as_json


def test_it_keeps_the_error_of_a_trace_it_cannot_read(
    started: Agent, django_capture_on_commit_callbacks: Any
) -> None:
    import gzip

    with django_capture_on_commit_callbacks(execute=True):
        upload(started, gzip.compress(b"this is not JSON"))
    trace = Trace.objects.get()
    assert trace.summary is None and trace.analysis_error
    analysed_at = trace.analysed_at
    trace_analyse(trace=trace)  # permanent: not tried again
    trace.refresh_from_db()
    assert trace.analysed_at == analysed_at
    assert RunDiagnosis.objects.get(run=trace.run).error == ""  # the run is still diagnosed


def test_a_trace_adds_its_evidence_to_the_metric_stream(
    agent: Agent, django_capture_on_commit_callbacks: Any
) -> None:
    input_bound_run(agent)
    with django_capture_on_commit_callbacks(execute=True):
        upload(agent, trace_bytes())
    top = Finding.objects.filter(run=Run.objects.get()).order_by("rank").first()
    assert top is not None and top.rule_id == "dataloader.num_workers"
    sources = {e["source"] for e in top.evidence}
    assert "trace" in sources and "metrics (agent step timings)" in sources


def test_a_trace_the_analysis_fails_on_does_not_stall_the_diagnosis(
    started: Agent, django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfweb.diagnostics import services

    def explode(trace: Any) -> Any:
        raise MemoryError("8 GB trace")

    monkeypatch.setattr(services, "summarize", explode)
    with django_capture_on_commit_callbacks(execute=True):
        upload(started, trace_bytes())
    trace = Trace.objects.get()
    assert trace.analysis_error == "analysis failed: MemoryError('8 GB trace')"
    state = RunDiagnosis.objects.get(run=trace.run)
    assert state.diagnosed_at is not None and state.error == ""


def test_a_diagnosis_reads_the_latest_traces_of_each_rank(
    started: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfweb.diagnostics import evidence
    from perfweb.diagnostics.evidence import run_evidence

    monkeypatch.setattr(evidence, "TRACES_PER_RANK", 2)
    for n in range(3):
        upload(started, trace_bytes(), name=f"window-{n}")
    for trace in Trace.objects.all():
        trace_analyse(trace=trace)
    read = run_evidence(run=Run.objects.get()).traces
    assert [Path(t.source).name for t in read] == [
        "window-1.pt.trace.json.gz",
        "window-2.pt.trace.json.gz",
    ]


@needs_peer_trace
def test_a_trace_over_the_workers_memory_budget_is_analysed_in_part_and_says_so(
    started: Agent, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    # 1 MB above the base: the tables (0.2 x its 15 MB of JSON) do not fit
    settings.PERFWEB_DIAGNOSIS_MEMORY_MB = 101
    with django_capture_on_commit_callbacks(execute=True):
        upload(started, NS_TRACE.read_bytes(), name="rank-0", chunk_bytes=1024 * 1024)
    trace = Trace.objects.get()
    assert trace.analysis_error == "" and trace.summary["tables"] is None
    stored = summary_from_json(trace.summary)
    assert stored.degraded == "operator and kernel tables not built (over the 101 MB budget)"
    assert stored.temporal == summarize(load_trace(NS_TRACE)).temporal
