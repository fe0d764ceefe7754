"""Never a false all-clear: a run the agent could not see is reported as not examined, with
why and the one line that fixes it; "No finding" only when the evidence was there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from perfweb_recommender.coverage import (
    FIX_LINE,
    MISSING_FACTS,
    MISSING_GPU,
    MISSING_SERIES,
    MISSING_STEPS,
    MISSING_TRACE,
    NO_GPU_REASON,
    NO_TORCH_REASON,
    NO_TRACE_REASON,
    NOT_OBSERVED,
    OBSERVED,
    PARTLY_OBSERVED,
    UNSEEN_REASON,
    missing_evidence,
    run_coverage,
)
from perfweb_recommender.run_end import ended_early
from tests.agent.conftest import ROOT, write_script
from tests.recommender.offline_runs import inference_batch, write_agent

TORCH = {"torch.version": "2.13.0"}


def _analyze(path: Path, *fmt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfweb_recommender", "analyze", str(path), *fmt],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_it_calls_a_run_without_steps_trace_or_gpu_samples_not_observed() -> None:
    coverage = run_coverage(facts=TORCH, steps=0, process_samples=40)
    assert coverage.verdict == NOT_OBSERVED
    assert coverage.kind is None
    assert coverage.reason == UNSEEN_REASON
    assert coverage.causes == [UNSEEN_REASON, NO_GPU_REASON, NO_TRACE_REASON]
    assert coverage.headline.startswith("Not examined, so not healthy either")
    assert "no optimizer step, no backward pass, no nn.Module call" in coverage.statement
    assert coverage.fix == FIX_LINE == "perfweb_agent.step()"
    assert "perfweb_agent.step()" in coverage.statement
    assert coverage.not_seen == ["steps or requests", "profiler traces", "GPU samples"]
    assert coverage.seen == ["40 process samples"]
    assert "No finding" not in coverage.no_findings_text(traces=False)
    assert coverage.no_findings_text(traces=False) == coverage.statement


def test_it_lists_each_kind_of_evidence_not_seen_once_with_why() -> None:
    coverage = run_coverage(facts=TORCH, steps=0, process_samples=40)
    assert coverage.missing == [
        f"{MISSING_TRACE} ({NO_TRACE_REASON})",
        f"{MISSING_STEPS} ({UNSEEN_REASON})",
        f"{MISSING_GPU} ({NO_GPU_REASON})",
    ]
    cpu_only = "trace rank 0 has no GPU kernels (a CPU-only trace)"
    observed = run_coverage(facts=TORCH, steps=30, traces=1, gpu_samples=10, trace_gaps=[cpu_only])
    assert observed.missing == [cpu_only]
    assert run_coverage(facts={}, steps=3).missing == [MISSING_TRACE, MISSING_FACTS, MISSING_SERIES]


def test_a_bare_trace_gets_the_same_list_without_the_agents_reasons() -> None:
    from perfweb_recommender.evidence import RunEvidence

    assert missing_evidence(RunEvidence(), agent_run=False) == [
        MISSING_TRACE,
        MISSING_FACTS,
        MISSING_STEPS,
        MISSING_SERIES,
    ]


def test_it_says_torch_was_never_imported_when_no_torch_fact_came() -> None:
    coverage = run_coverage(facts={}, steps=0)
    assert coverage.verdict == NOT_OBSERVED
    assert coverage.reason == NO_TORCH_REASON
    assert "never imported torch" in coverage.statement


def test_it_calls_gpu_samples_without_steps_only_partly_observed() -> None:
    coverage = run_coverage(facts=TORCH, steps=0, gpu_samples=120)
    assert coverage.verdict == PARTLY_OBSERVED
    assert coverage.statement.startswith("Only partly examined")
    assert coverage.causes == [UNSEEN_REASON, NO_TRACE_REASON]  # the GPU was seen
    assert "120 GPU samples" in coverage.statement and "perfweb_agent.step()" in coverage.statement
    assert "No finding" not in coverage.no_findings_text(traces=False)


def test_it_gives_the_all_clear_only_with_steps_seen() -> None:
    coverage = run_coverage(facts={**TORCH, "steps.source": "backward"}, steps=30, ranks=2)
    assert coverage.verdict == OBSERVED
    assert (coverage.kind, coverage.steps_source) == ("training", "backward")
    assert coverage.statement == coverage.fix == coverage.reason == ""
    assert coverage.seen == ["30 steps on 2 ranks"]
    assert coverage.no_findings_text(traces=True).startswith("No finding: nothing in this run's")


def test_it_labels_the_run_by_what_the_agent_saw() -> None:
    inference = run_coverage(
        facts={"workload.kind": "inference", "steps.source": "module"}, steps=12
    )
    assert (inference.kind, inference.unit, inference.seen) == (
        "inference",
        "request",
        ["12 requests"],
    )
    legacy = run_coverage(facts={}, steps=5)  # an older agent timed optimizer steps only
    assert legacy.kind == "training"
    unknown = run_coverage(facts={"workload.kind": "serving", "steps.source": "magic"}, steps=0)
    assert (unknown.kind, unknown.steps_source) == (None, None)


SILENT = """
import sys, time, perfweb_agent
perfweb_agent.attach(offline=sys.argv[1], interval=0.05, flush_interval=0.1)
time.sleep(0.4)
print("done")
"""


def test_the_cli_reports_a_real_agent_run_it_could_not_see(tmp_path: Path) -> None:
    out = tmp_path / "offline"
    script = write_script(tmp_path, SILENT)
    ran = subprocess.run(
        [sys.executable, str(script), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (ran.returncode, ran.stdout) == (0, "done\n"), ran.stderr
    text = _analyze(out)
    assert text.returncode == 0, text.stderr
    assert "No finding" not in text.stdout
    assert "Not examined, so not healthy either" in text.stdout
    assert "never imported torch" in text.stdout
    assert "fix: perfweb_agent.step()" in text.stdout
    assert text.stdout.count("no agent step timings") == 1  # one list of what was not seen
    report = json.loads(_analyze(out, "--format", "json").stdout)
    assert report["missing_evidence"] == report["coverage"]["missing"]
    assert report["findings"] == []
    assert report["coverage"]["verdict"] == NOT_OBSERVED
    assert report["coverage"]["steps"] == 0 and report["coverage"]["fix"] == "perfweb_agent.step()"


def test_the_cli_names_the_sources_it_watched_for_a_torch_run_without_steps(
    tmp_path: Path,
) -> None:
    root = write_agent(
        tmp_path / "offline",
        start={"facts": TORCH},
        batches=[
            {
                "metrics": [
                    {
                        "device": "process",
                        "name": "process.cpu_percent",
                        "t": [1.0, 2.0],
                        "v": [90.0, 95.0],
                    }
                ]
            },
        ],
    )
    result = _analyze(root)
    assert result.returncode == 0, result.stderr
    assert "no optimizer step, no backward pass, no nn.Module call" in result.stdout
    assert "seen: 2 process samples" in result.stdout
    assert "No finding" not in result.stdout


def test_the_cli_still_gives_the_all_clear_for_a_clean_observed_run(tmp_path: Path) -> None:
    batch = inference_batch([0.01] * 50, batch_size=4)
    batch["facts"] = {**batch["facts"], "workload.kind": "training", "steps.source": "optimizer"}
    root = write_agent(tmp_path / "offline", start={"facts": TORCH}, batches=[batch])
    result = _analyze(root)
    assert result.returncode == 0, result.stderr
    assert "workload: training, boundaries from the primary optimizer's step" in result.stdout
    assert "50 steps timed by the agent" in result.stdout
    assert "No finding: nothing in this run's metrics points at a fix worth making." in (
        result.stdout
    )
    assert "Not examined" not in result.stdout


def test_a_one_step_run_is_one_step_in_the_text_report(tmp_path: Path) -> None:
    # dcgan --dry-run: one iteration (two optimizers stepped, one step); "1 steps" read wrong.
    batch = inference_batch([2.3], batch_size=8)
    batch["facts"] = {**batch["facts"], "workload.kind": "training", "steps.source": "optimizer"}
    root = write_agent(tmp_path / "offline", start={"facts": TORCH}, batches=[batch])
    result = _analyze(root)
    assert result.returncode == 0, result.stderr
    assert "seen: 1 step\n" in result.stdout or "seen: 1 step," in result.stdout
    assert "1 step timed by the agent on 1 rank(s)" in result.stdout
    assert "1 steps" not in result.stdout


def test_a_process_killed_before_its_agent_flushed_is_named_with_its_signal() -> None:
    (killed,) = ended_early(exit_code=143, silent=["rank 1"])
    assert killed.startswith(
        "rank 1's agent sent no final data: its process was killed by "
        "signal 15 (SIGTERM) before the agent could flush"
    )
    assert "signal 9 (SIGKILL)" in ended_early(exit_code=-9, silent=["the script"])[0]
    assert "ended (exit code 1)" in ended_early(exit_code=1, silent=["the script"])[0]
    assert ended_early(exit_code=143, silent=[]) == []  # every agent flushed: nothing lost
    lost = ended_early(exit_code=143, silent=["the script"])
    coverage = run_coverage(facts=TORCH, steps=7, lost=lost)
    assert coverage.verdict == OBSERVED and coverage.missing[-1] == lost[0]
    assert coverage.no_findings_text(traces=False).startswith("No finding in what was recorded")
    assert "the end of the run was lost" in coverage.no_findings_text(traces=False)


KILLED = """
import glob, gzip, json, os, signal, sys, time
import torch


def steps_on_disk():
    # the agent's offline batches (perfweb_contract.layout), each written whole (os.replace)
    pattern = os.path.join(os.environ["PERF_AGENT_OFFLINE"], "*", "*", "batch-*.json.gz")
    for path in glob.glob(pattern):
        with open(path, "rb") as handle:
            if json.loads(gzip.decompress(handle.read())).get("steps", {}).get("index"):
                return True
    return False


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
tail = None  # steps still to run once the agent has flushed some: never sent
for step in range(600):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.05)
    if tail is None and step % 5 == 4 and steps_on_disk():
        tail = 3  # the next flush is seconds away (flush interval 5 s)
    elif tail is not None:
        tail -= 1
        if tail == 0:
            break
print("stopping", flush=True)
print(f"ran {step + 1} steps", file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler's preemption does
"""


def _steps_ran(stderr: str) -> int:
    (count,) = re.findall(r"^ran (\d+) steps$", stderr, re.M)
    return int(count)


def test_a_run_killed_by_sigterm_says_its_end_was_lost(tmp_path: Path) -> None:
    # imagenet under SIGTERM: the script's agent never flushed its last batches; the
    # report said "observed" as if it had seen the whole run.
    out = tmp_path / "offline"
    script = write_script(tmp_path, KILLED)
    ran = subprocess.run(
        ["perf-agent", "attach", "--offline", str(out), "--", sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (ran.returncode, ran.stdout) == (143, "stopping\n"), ran.stderr
    report = json.loads(_analyze(out, "--format", "json").stdout)
    coverage = report["coverage"]
    # the script stops 3 steps after the agent's first flush of steps: those are gone
    assert coverage["verdict"] == OBSERVED and coverage["steps"] < _steps_ran(ran.stderr)
    (lost,) = coverage["lost"]
    assert lost.startswith(
        "the script's agent sent no final data: its process was killed by signal 15 (SIGTERM)"
    )
    assert lost in report["missing_evidence"]
    text = _analyze(out).stdout
    assert "No finding: nothing" not in text  # never the plain all-clear
    assert lost in text


def test_it_says_why_a_profiler_window_was_skipped_or_cut(tmp_path: Path) -> None:
    skipped = "this run's 30 steps were only confirmed as steps when it ended"
    cut = "after 2 of 5 steps: a record_function scope that began inside the window stayed open"
    facts = {**TORCH, "profiler.skipped": skipped, "profiler.window_cut": cut}
    coverage = run_coverage(facts=facts, steps=30, process_samples=5)
    assert coverage.missing[0] == f"{MISSING_TRACE} ({skipped})"
    assert coverage.profiler == [
        f"profiler window skipped: {skipped}",
        f"profiler window cut short: {cut}",
    ]
    assert coverage.as_json()["profiler"] == coverage.profiler
    assert run_coverage(facts=TORCH, steps=30).profiler == []
    batch = inference_batch([0.01] * 30, batch_size=4)
    batch["facts"] = {**batch["facts"], **facts, "workload.kind": "training"}
    root = write_agent(tmp_path / "offline", start={"facts": TORCH}, batches=[batch])
    text = _analyze(root).stdout
    assert f"\nprofiler window skipped: {skipped}\n" in text
    assert f"  - {MISSING_TRACE} ({skipped})\n" in text
    assert json.loads(_analyze(root, "--format", "json").stdout)["coverage"]["profiler"] == [
        f"profiler window skipped: {skipped}",
        f"profiler window cut short: {cut}",
    ]
