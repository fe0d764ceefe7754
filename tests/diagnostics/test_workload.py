"""A run's workload on the server: the coverage behind "no findings" (run page, findings and
workload APIs), and an inference run's latency percentiles, throughput and peak memory."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from django.test import Client

from perfweb.diagnostics.evidence import STEP_POINTS, run_evidence
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.diagnostics.workload import run_request_stats
from perfweb.runs.models import Run
from tests.conftest import PASSWORD
from tests.server.agent_client import RUN_ID, T0, Agent

from .conftest import input_bound_run, stream_steps

pytestmark = pytest.mark.django_db
PAGE = f"/runs/{RUN_ID}/"
WORKLOAD = f"/api/v1/runs/{RUN_ID}/workload"
FINDINGS = f"/api/v1/runs/{RUN_ID}/findings"
INFERENCE_FACTS = {"workload.kind": "inference", "steps.source": "module"}
NO_GPU: list[dict[str, Any]] = []


def logged_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def page_config(html: str) -> dict[str, Any]:
    start = html.index('<script id="page-config" type="application/json">')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


def unseen_run(agent: Agent) -> None:
    """What word_language_model gave: torch imported, process samples, no step, no GPU."""
    assert agent.start(devices=NO_GPU, facts={"torch.version": "2.13.0"}).status_code == 200
    ts = [T0 + i for i in range(20)]
    metrics = [{"device": "process", "name": "process.cpu_percent", "t": ts, "v": [99.0] * 20}]
    assert agent.batch(metrics=metrics, steps=None, facts={}).status_code == 200
    assert agent.finish(exit_code=0).status_code == 200


def inference_run(
    agent: Agent, latencies: list[float], *, batch_size: int = 8, per_batch: int = 50
) -> list[float]:
    """Requests back to back from T0 on rank 0, with batch sizes; returns their end times."""
    assert agent.start(devices=NO_GPU, facts={"torch.version": "2.13.0"}).status_code == 200
    ends = list(T0 + np.cumsum(latencies))
    for first in range(0, len(latencies), per_batch):
        part = slice(first, first + per_batch)
        t, d = ends[part], latencies[part]
        body = {
            "metrics": [
                {
                    "device": "rank:0",
                    "name": "step.batch_size",
                    "t": t,
                    "v": [float(batch_size)] * len(t),
                },
                {
                    "device": "process",
                    "name": "process.rss",
                    "t": t,
                    "v": [3e8 + 1e6 * (first + i) for i in range(len(t))],
                },
            ],
            "steps": {
                "rank": 0,
                "index": list(range(first, first + len(t))),
                "t": t,
                "duration": d,
                "data_wait": [0.0] * len(t),
            },
            "facts": INFERENCE_FACTS,
        }
        assert agent.batch(**body).status_code == 200
    return ends


def test_it_never_calls_an_unseen_run_healthy_on_its_page(agent: Agent, owner: Any) -> None:
    unseen_run(agent)
    diagnose_run_task(Run.objects.get().id)
    html = logged_in(owner).get(PAGE).content.decode()
    assert 'data-testid="coverage-statement"' in html and 'data-verdict="not_observed"' in html
    assert "Not examined, so not healthy either" in html
    assert "no optimizer step, no backward pass, no nn.Module call" in html
    assert '<code class="coverage-fix">perfweb_agent.step()</code>' in html
    assert html.count("<li>no agent step timings") == 1  # listed once, not once per list
    assert "No finding" not in html
    assert 'data-testid="workload-kind">not seen yet<' in html


def test_it_says_the_same_in_the_read_api(agent: Agent, token: str) -> None:
    unseen_run(agent)
    diagnose_run_task(Run.objects.get().id)
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    findings = Client().get(FINDINGS, **bearer).json()
    assert findings["findings"] == []
    assert findings["coverage"]["verdict"] == "not_observed"
    assert findings["coverage"]["fix"] == "perfweb_agent.step()"
    workload = Client().get(WORKLOAD, **bearer).json()
    assert workload["coverage"] == findings["coverage"]
    assert workload["coverage"]["seen"] == ["20 process samples"]
    assert workload["coverage"]["not_seen"] == [
        "steps or requests",
        "profiler traces",
        "GPU samples",
    ]
    assert [item.split(":")[0] for item in workload["coverage"]["missing"]] == [
        "no profiler trace",
        "no agent step timings",
        "no GPU samples",
    ]  # one list: each kind of evidence not seen once, with why
    assert workload["requests"] is None


def test_a_clean_observed_run_still_gets_its_all_clear(agent: Agent, owner: Any) -> None:
    input_bound_run(agent, wait_share=0.0, facts={"host.cpu_count": 8, "torch.num_threads": 1})
    diagnose_run_task(Run.objects.get().id)
    html = logged_in(owner).get(PAGE).content.decode()
    assert 'data-testid="coverage-statement"' not in html
    assert "No finding: nothing in this run&#x27;s metrics points at a fix worth making." in html
    assert 'data-testid="workload-kind">training<' in html


def test_it_lists_what_an_examined_run_lacked_on_its_page_and_in_the_api(
    agent: Agent, owner: Any, token: str
) -> None:
    input_bound_run(agent, wait_share=0.0, facts={"host.cpu_count": 8, "torch.num_threads": 1})
    diagnose_run_task(Run.objects.get().id)
    missing = (
        Client().get(WORKLOAD, HTTP_AUTHORIZATION=f"Bearer {token}").json()["coverage"]["missing"]
    )
    assert missing == [
        "no profiler trace: kernel times, GPU idle causes, copies and syncs",
        "no GPU samples: GPU utilisation, memory, power and throttling not measured "
        "(no GPU the agent could read through NVML)",
    ]
    html = logged_in(owner).get(PAGE).content.decode()
    listed = html[html.index('data-testid="coverage-missing"') :]
    assert "Not judged, for lack of this evidence:" in listed
    assert "<li>no profiler trace: kernel times, GPU idle causes, copies and syncs</li>" in listed


@pytest.mark.parametrize("worker_end", ["killed", "flushed", "kept on the host"])
def test_a_run_whose_script_was_killed_before_its_agent_flushed_says_its_end_was_lost(
    token: str, owner: Any, worker_end: str
) -> None:
    # `perf-agent attach` as a scheduler's SIGTERM leaves it: the launcher finishes with the
    # script's status (143), the script's own agent never sends its last batches or finish.
    launcher = Agent(token, agent_id="1" * 32)
    assert launcher.start(role="launcher", rank=None, devices=NO_GPU).status_code == 200
    worker = Agent(token, agent_id="2" * 32)
    assert (
        worker.start(
            role="worker", rank=None, local_rank=None, world_size=None, devices=NO_GPU
        ).status_code
        == 200
    )
    stream_steps(worker, wait_share=0.0, facts={"host.cpu_count": 8, "torch.num_threads": 1})
    if worker_end == "flushed":
        assert worker.finish(exit_code=0, final=False).status_code == 200
    if worker_end == "kept on the host":  # a slow server: its finish waits in the spill
        body = {
            "run_id": worker.run_id,
            "agent_id": worker.agent_id,
            "unsent": {"requests": 2, "exit_code": 0, "final": False},
        }
        assert worker.post("heartbeat", body).status_code == 200
    assert launcher.finish(exit_code=143).status_code == 200
    diagnose_run_task(Run.objects.get().id)
    coverage = Client().get(WORKLOAD, HTTP_AUTHORIZATION=f"Bearer {token}").json()["coverage"]
    html = logged_in(owner).get(PAGE).content.decode()
    if worker_end == "flushed":  # every agent sent its last data: nothing was lost
        assert coverage["lost"] == []
        return
    (lost,) = coverage["lost"]
    if worker_end == "killed":
        assert lost.startswith(
            "the script's agent sent no final data: its process was "
            "killed by signal 15 (SIGTERM) before the agent could flush"
        )
    else:  # not killed, not lost: on its way, and unseen until then
        assert lost.startswith(
            "the script's final data has not reached the server yet: its "
            "agent kept its last batches and its finish in the spill"
        )
    assert lost in coverage["missing"]
    assert "No finding: nothing" not in html and "No finding in what was recorded" in html
    assert lost.split(":")[0].replace("'", "&#x27;") in html


def test_it_computes_an_inference_runs_request_statistics(agent: Agent, token: str) -> None:
    rng = np.random.default_rng(7)
    latencies = list(rng.uniform(0.01, 0.03, 300)) + [0.2] * 3  # three slow requests
    ends = inference_run(agent, latencies)
    body = Client().get(WORKLOAD, HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert body["kind"] == "inference" and body["coverage"]["verdict"] == "observed"
    assert body["coverage"]["seen"][0] == "303 requests"
    requests = body["requests"]
    span = ends[-1] - T0
    assert requests["requests"] == requests["requests_total"] == 303
    for name, q in (("latency_p50_s", 50), ("latency_p95_s", 95), ("latency_p99_s", 99)):
        assert requests[name] == pytest.approx(np.percentile(latencies, q))
    assert requests["throughput_rps"] == pytest.approx(303 / span)
    assert requests["throughput_sps"] == pytest.approx(8 * 303 / span)
    assert requests["peak_rss_bytes"] == 3e8 + 1e6 * 302
    windows = requests["windows"]
    assert len(windows["t"]) >= 10
    assert windows["p99_s"][-1] == pytest.approx(0.2)  # the slow tail shows in the last window
    assert max(windows["p99_s"][:-3]) < 0.05


def test_requests_inside_a_stored_profiler_window_are_left_out_of_the_latencies(
    agent: Agent,
) -> None:
    from perfweb.diagnostics.models import Trace

    latencies = [0.010] * 20 + [0.100] * 6 + [0.010] * 74  # 20..25 paid for the profiler
    inference_run(agent, latencies)
    run = Run.objects.get()
    stats, _ = run_request_stats(run=run)
    assert stats is not None and stats.latency_p99_s == pytest.approx(0.100)
    Trace.objects.create(
        run=run, agent_id="a", name="rank0-step20-25", rank=0, path="x", size=1, sha256="0" * 64
    )
    stats, _ = run_request_stats(run=run)
    assert stats is not None and stats.profiled_requests == 6 and stats.requests == 100
    assert stats.latency_p99_s == pytest.approx(0.010)


def test_it_reads_a_long_runs_percentiles_from_raw_requests_only(agent: Agent) -> None:
    latencies = [0.001] * (STEP_POINTS + 1000)
    inference_run(agent, latencies, per_batch=2000)
    stats, total = run_request_stats(run=Run.objects.get())
    assert stats is not None and total == STEP_POINTS + 1000
    assert stats.requests <= STEP_POINTS  # the latest raw window, never downsampled points
    assert stats.latency_p50_s == pytest.approx(0.001)


def test_a_long_runs_samples_per_second_come_from_its_one_batch_size(
    agent: Agent, owner: Any
) -> None:
    """Every request had one sample: samples/s is requests/s, even where the batch-size
    series would read downsampled; the page says which share of the run it read."""
    latencies = [0.001] * (STEP_POINTS + 1000)
    inference_run(agent, latencies, per_batch=2000, batch_size=1)
    stats, total = run_request_stats(run=Run.objects.get())
    assert stats is not None and stats.throughput_sps == pytest.approx(stats.throughput_rps)
    html = logged_in(owner).get(PAGE).content.decode()
    assert f"the latest {stats.requests:,} of the run's {total:,} requests" in html
    assert "<dt>Samples/s</dt><dd>—</dd>" not in html
    # One count a place: the header has the whole run, the findings the panel's window.
    assert f'<dt>Requests</dt><dd data-field="steps">{total}' in html
    assert len(run_evidence(run=Run.objects.get()).steps) == stats.requests
    assert f"{total} requests" in html and f"{total} steps" not in html  # its process too


def test_an_inference_runs_page_shows_requests_not_a_step_time_row(
    agent: Agent, owner: Any
) -> None:
    inference_run(agent, [0.02] * 100)
    html = logged_in(owner).get(PAGE).content.decode()
    assert 'data-testid="requests"' in html
    assert 'id="latency-chart"' in html and 'id="throughput-chart"' in html
    assert "<dt>Latency p50</dt><dd>20.0 ms</dd>" in html
    assert "<dt>Requests</dt><dd>100</dd>" in html
    assert 'data-testid="workload-kind">inference<' in html
    config = page_config(html)
    assert config["kind"] == "inference"
    assert "steps" not in {row["key"] for row in config["rows"]}


def test_a_training_runs_page_has_no_requests_panel(agent: Agent, owner: Any) -> None:
    input_bound_run(agent)
    html = logged_in(owner).get(PAGE).content.decode()
    assert 'data-testid="requests"' not in html
    assert "steps" in {row["key"] for row in page_config(html)["rows"]}


def test_it_hides_the_workload_from_an_outsider(agent: Agent, outsider: Any) -> None:
    inference_run(agent, [0.02] * 10)
    assert logged_in(outsider).get(WORKLOAD).status_code == 404


def test_it_finds_host_contention_from_the_stored_host_series(agent: Agent) -> None:
    """Through ingest and the diagnosis task: 16 cores 96% busy, the job's 8 threads get 2."""
    from perfweb.diagnostics.models import Finding

    facts = {
        "torch.version": "2.13.0",
        "host.cpu_count": 16,
        "host.usable_cores": 16,
        "threads.intra_op": 8,
    }
    assert agent.start(devices=NO_GPU, facts=facts).status_code == 200
    ts = [T0 + i for i in range(60)]
    metrics = [
        {"device": "host", "name": "host.cpu_percent", "t": ts, "v": [96.0] * 60},
        {"device": "process", "name": "process.cpu_percent", "t": ts, "v": [200.0] * 60},
    ]
    steps = {
        "rank": 0,
        "index": list(range(60)),
        "t": ts,
        "duration": [1.0] * 60,
        "data_wait": [0.0] * 60,
    }
    assert agent.batch(metrics=metrics, steps=steps, facts={}).status_code == 200
    diagnose_run_task(Run.objects.get().id)
    stored = Finding.objects.get(rule_id="cpu.host_contention")
    assert stored.risk == "system"
    numbers = {e["label"]: e["value"] for e in stored.evidence}
    assert numbers["host-wide CPU (median)"] == 96.0
    assert numbers["the job's CPU (median)"] == 2.0
    assert numbers["cores the job's threads ask for"] == 8.0


def test_gpu_samples_without_steps_are_only_partly_examined(agent: Agent, owner: Any) -> None:
    assert agent.start(facts={"torch.version": "2.13.0"}).status_code == 200
    assert agent.batch(steps=None).status_code == 200  # GPU and process samples, no step
    diagnose_run_task(Run.objects.get().id)
    html = logged_in(owner).get(PAGE).content.decode()
    assert 'data-verdict="partly_observed"' in html
    assert "Only partly examined: no step or request was timed" in html
    assert "10 GPU samples" in html
    assert "No finding" not in html


def test_an_inference_run_one_request_at_a_time_gets_dynamic_batching(
    agent: Agent, owner: Any
) -> None:
    """Through ingest and the diagnosis task: 1-sample requests back to back, 1 of 8 cores."""
    assert agent.start(devices=NO_GPU, facts={"host.usable_cores": 8}).status_code == 200
    ends = [T0 + 0.05 * (i + 1) for i in range(100)]
    body = {
        "metrics": [
            {"device": "rank:0", "name": "step.batch_size", "t": ends, "v": [1.0] * 100},
            {"device": "process", "name": "process.cpu_percent", "t": ends, "v": [100.0] * 100},
        ],
        "steps": {
            "rank": 0,
            "index": list(range(100)),
            "t": ends,
            "duration": [0.05] * 100,
            "data_wait": [0.0] * 100,
        },
        "facts": INFERENCE_FACTS,
    }
    assert agent.batch(**body).status_code == 200
    diagnose_run_task(Run.objects.get().id)
    from perfweb.diagnostics.models import Finding

    stored = Finding.objects.get(rule_id="inference.dynamic_batching")
    numbers = {e["label"]: e["value"] for e in stored.evidence}
    assert numbers["samples per request (median)"] == 1.0
    assert numbers["CPU used of usable cores"] == 0.125
    html = logged_in(owner).get(PAGE).content.decode()
    assert 'data-finding="inference.dynamic_batching"' in html
    assert "of request time" in html and "of step time" not in html
