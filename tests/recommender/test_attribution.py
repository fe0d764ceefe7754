"""Attribution on real recorded runs (tests/recommender/recorded_runs.py): ranks per host
from the processes the agent saw, each DataLoader judged on its own wait, evaluation before
the first optimizer step kept out of the training steps, a crashed run led by its exit."""

from __future__ import annotations

from typing import Any

import pytest

from perfweb_contract.cpulist import format_cpu_list, parse_cpu_list
from perfweb_recommender.api import analyze_path
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.offline import find_runs, load_run
from perfweb_recommender.rules.dataloader import dataloader_persistent_workers
from perfweb_recommender.rules.signals import ranks_per_host, ranks_span_hosts
from perfweb_recommender.rules.snippets import (
    command_text,
    dynamic_quantization_snippet,
    pinning_snippet,
)
from perfweb_recommender.text_report import render_text


def test_a_single_host_spawned_job_on_loopback_gets_no_multi_node_critical(
    recorded: Any,
) -> None:
    run = recorded("spawn_ddp")
    assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    ids = [f.id for f in report.findings + report.host_conditions]
    assert "distributed.loopback_init" not in ids
    assert not any(f.critical for f in report.findings)
    evidence, _ = load_run(find_runs(run.offline)[-1])
    assert ranks_per_host(evidence) == 2 == report.run["ranks"]
    assert not ranks_span_hosts(evidence, world_size=2)


@pytest.mark.parametrize("script", ["fork_ddp", "os_fork_ddp"])
def test_forked_ranks_report_each_as_a_rank_of_its_own(recorded: Any, script: str) -> None:
    # multiprocessing's fork context and a bare os.fork (each child leaving by os._exit):
    # the inherited agent re-arms in each child at its first optimizer step.
    run = recorded(script)
    assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    assert report.run["steps"] == 24 and report.run["ranks"] == 2  # 12 steps on each rank
    ids = [f.id for f in report.findings + report.host_conditions]
    assert "distributed.loopback_init" not in ids
    assert not any(f.critical for f in report.findings)
    evidence, _ = load_run(find_runs(run.offline)[-1])
    assert evidence.ranks_by_host() == {evidence.processes[0].host: {0, 1}}
    assert evidence.world_size == 2
    by_rank = sorted((s.rank, s.index) for s in evidence.steps)
    assert [index for rank, index in by_rank if rank == 0] == list(range(12))
    assert [index for rank, index in by_rank if rank == 1] == list(range(12))


def test_forked_trainers_without_a_process_group_are_told_apart(recorded: Any) -> None:
    run = recorded("os_fork_plain")
    assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr[-2000:]
    evidence, _ = load_run(find_runs(run.offline)[-1])
    assert sorted(s.rank for s in evidence.steps) == [0] * 5 + [1] * 5  # order among forks
    assert {"process:0", "process:1"} <= set(evidence.devices_of("process.rss"))


def test_a_dataloader_worker_forked_from_the_script_sends_nothing(recorded: Any) -> None:
    evidence, _ = load_run(find_runs(recorded("two_loaders").offline)[-1])
    workers = [p for p in evidence.processes if p.role != "launcher"]
    assert len(workers) == 1 and workers[0].rank is None  # the script; not its loader's worker


def test_the_same_ranks_on_two_hosts_are_a_multi_node_job(recorded: Any) -> None:
    evidence, _ = load_run(find_runs(recorded("spawn_ddp").offline)[-1])
    moved = [p for p in evidence.processes if p.rank == 1]
    evidence.processes = [p for p in evidence.processes if p.rank != 1]
    evidence.processes += [type(p)(host="node-b", role=p.role, rank=p.rank) for p in moved]
    assert ranks_span_hosts(evidence, world_size=2) and ranks_per_host(evidence) == 1
    from perfweb_recommender.rules.distributed import distributed_loopback_init

    found = distributed_loopback_init(evidence)
    assert found is not None and found.critical
    numbers = {e.label: e.value for e in found.evidence}
    assert numbers["hosts the agents reported from"] == 2


def test_a_run_that_crashes_at_import_leads_with_its_exit_code_and_error(recorded: Any) -> None:
    run = recorded("crash_at_import")
    assert run.returncode == 1 and run.stdout == ""  # the guest changed neither
    assert run.stderr.rstrip().endswith(
        "ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"
    )
    report = analyze_path(run.offline)
    coverage = report.coverage
    assert coverage is not None and coverage.exit_code == 1
    assert coverage.failure == (
        "exit code 1, ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"
    )
    assert coverage.fix == "" and "perfweb_agent.step()" not in coverage.statement
    text = render_text(report)
    assert text.splitlines()[1] == f"failed: {coverage.failure}"
    assert "perfweb_agent.step()" not in text and "mark" not in text.lower()
    body = report.as_json()["coverage"]
    assert (body["exit_code"], body["fix"]) == (1, "")
    assert body["error"] == "ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"


def _finding(report: Any, rule_id: str) -> Any:
    return next((f for f in report.findings if f.id == rule_id), None)


def test_the_dataloader_fix_is_addressed_to_the_loader_the_training_loop_waits_on(
    recorded: Any,
) -> None:
    run = recorded("two_loaders")
    assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    # The training loader sleeps on each read: its wait is I/O, which dataloader.io_wait
    # judges (it supersedes num_workers) on that loader alone, the eval loader left out.
    found = _finding(report, "dataloader.io_wait")
    assert found is not None, [f.id for f in report.findings]
    assert _finding(report, "dataloader.num_workers") is None
    numbers = {e.label: e.value for e in found.evidence}
    assert numbers["DataLoader workers"] == 1  # the training loader's, not the eval loader's 0
    assert 0 < numbers["step time waiting on the DataLoader"] < 1
    assert found.fix.knobs["num_workers"] > 1  # more than the one it has: the waits overlap


def test_evaluation_before_the_first_optimizer_step_is_not_a_training_step(
    recorded: Any,
) -> None:
    report = analyze_path(recorded("two_loaders").offline)
    assert report.run["steps"] == 45  # the 45 optimizer steps that ran, exactly
    coverage = report.coverage
    assert coverage is not None and coverage.pre_training_calls == 4  # 16 samples / 4
    assert any("4 module calls before the first optimizer step" in s for s in coverage.seen)


def test_slow_steps_without_an_epoch_boundary_are_no_worker_respawns(recorded: Any) -> None:
    # Long stalls (a slow read now and then, evaluation passes) but the training loader never
    # ran out: not one epoch start, so persistent_workers would save nothing.
    report = analyze_path(recorded("two_loaders").offline)
    assert _finding(report, "dataloader.persistent_workers") is None
    evidence, _ = load_run(find_runs(recorded("two_loaders").offline)[-1])
    assert evidence.fact("dataloader.0.epoch_starts") == 0
    assert max(s.data_wait_s or 0.0 for s in evidence.steps) > 0.2  # the stalls were there


def test_stalls_at_real_epoch_starts_are_worker_respawns(recorded: Any) -> None:
    run = recorded("epochs")
    assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr[-2000:]
    found = _finding(analyze_path(run.offline), "dataloader.persistent_workers")
    assert found is not None and found.fix.knob == "persistent_workers=true"
    numbers = {e.label: e.value for e in found.evidence}
    assert numbers["epoch starts (new iterator, sampler used up)"] == 5  # 6 epochs
    assert numbers["stalls"] <= 5


def _with_facts(recorded_run: Any, **facts: Any) -> Any:
    evidence, _ = load_run(find_runs(recorded_run.offline)[-1])
    evidence.facts.update(facts)
    return evidence


def test_the_dataloader_fix_speaks_the_users_framework(recorded: Any) -> None:
    run = recorded("epochs")  # one worker, not persistent, stalls at every epoch start
    plain = dataloader_persistent_workers(_with_facts(run))
    assert plain is not None
    assert plain.fix.snippet == "DataLoader(dataset, batch_size=..., persistent_workers=True)"
    hf = dataloader_persistent_workers(_with_facts(run, **{"framework.trainer": "transformers"}))
    assert hf is not None
    assert hf.fix.snippet == "TrainingArguments(..., dataloader_persistent_workers=True)"
    assert "DataLoader(" not in hf.fix.snippet
    lightning = dataloader_persistent_workers(
        _with_facts(run, **{"framework.trainer": "lightning"})
    )
    assert lightning is not None
    assert "def train_dataloader(self):" in lightning.fix.snippet
    assert "persistent_workers=True" in lightning.fix.snippet
    assert plain.fix.knob == hf.fix.knob == lightning.fix.knob == "persistent_workers=true"


def test_the_quantisation_snippet_uses_the_installed_torchs_current_api() -> None:
    new = dynamic_quantization_snippet(RunEvidence(facts={"torch.version": "2.13.0+cpu"}))
    assert "quantize_(model, Int8DynamicActivationInt8WeightConfig())" in new
    assert "torch.ao.quantization.quantize_dynamic" not in new
    old = dynamic_quantization_snippet(RunEvidence(facts={"torch.version": "2.4.1"}))
    assert "torch.ao.quantization.quantize_dynamic" in old


def test_the_contention_fix_names_the_cores_the_job_may_use(recorded: Any) -> None:
    run = recorded("two_loaders")
    evidence, _ = load_run(find_runs(run.offline)[-1])
    assert evidence.fact("host.affinity")  # recorded by the agent ("0-1" on a 2-core host)
    allowed = parse_cpu_list(evidence.fact("host.affinity"))
    snippet = pinning_snippet(evidence, cores_wanted=1)
    first = snippet.splitlines()[0]
    assert first.startswith(f"taskset -c {allowed[0]} ") and first.endswith("two_loaders.py")
    if len(allowed) > 1:
        assert f"taskset -cp {format_cpu_list(allowed[1:])} " in snippet
    wide = _with_facts(run, **{"host.affinity": "4-7,12"})
    assert pinning_snippet(wide, cores_wanted=2).splitlines() == [
        f"taskset -c 4-5 {command_text(wide)}",
        "taskset -cp 6-7,12 <pid of the other work>",
    ]


def test_a_script_that_trains_then_serves_gets_a_training_and_a_requests_section(
    recorded: Any,
) -> None:
    run = recorded("train_then_serve")
    assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    assert report.run["kind"] == "training" and report.run["steps"] == 30  # evals between: none
    served = report.run["served"]
    assert (served["requests"], served["samples"]) == (20, 20)  # one sample a request
    assert 0 < served["latency_p50_s"] <= served["latency_p99_s"] < 1
    coverage = report.coverage
    assert coverage is not None and coverage.served_after_training == 20
    assert coverage.untimed_after_training == 0 and "requests after training" not in (
        coverage.not_seen
    )
    body = report.as_json()
    assert body["run"]["served"]["requests"] == 20
    assert body["coverage"]["served_after_training"] == 20
    text = render_text(report)
    assert "30 steps timed by the agent" in text
    section = text.partition("Requests after training:\n")[2].splitlines()
    assert section[0].startswith("  20 requests after the last optimizer step")


def test_requests_served_by_a_copy_of_the_model_are_said_to_be_unseen(recorded: Any) -> None:
    run = recorded("train_then_serve_a_copy")
    assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    assert report.run["steps"] == 30 and report.run["served"] is None
    coverage = report.coverage
    assert coverage is not None and coverage.untimed_after_training == 20
    assert "requests after training" in coverage.not_seen
    unseen = [m for m in coverage.missing if m.startswith("requests after training")]
    assert len(unseen) == 1 and "20 calls of another copy of the model" in unseen[0]
    assert "requests after training: 20 calls" in render_text(report)
    assert "Requests after training:" not in render_text(report)  # no section without them


def test_a_hugging_face_trainer_then_a_pipeline_gets_its_steps_and_its_requests(
    recorded: Any,
) -> None:
    run = recorded("hf_train_then_pipeline")
    assert (run.returncode, run.stdout) == (0, "done 6\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    assert report.run["steps"] == 6  # the Trainer's global steps, exactly
    assert report.run["served"]["requests"] == 10  # each pipeline call
    assert "10 requests after the last optimizer step" in render_text(report)


def test_the_trainers_last_evaluation_is_not_counted_as_requests_served(recorded: Any) -> None:
    # Trainer.evaluate after the last optimizer step calls the model in eval(), without
    # grad, as the pipeline does: only the pipeline's calls are requests.
    run = recorded("hf_train_evaluate_then_pipeline")
    assert (run.returncode, run.stdout) == (0, "done 6\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    assert report.run["steps"] == 6
    assert report.run["served"]["requests"] == 10  # the pipeline's calls, not the eval's 3
    assert report.coverage is not None and report.coverage.served_after_training == 10


def test_a_lightning_fit_whose_validation_ends_it_serves_no_requests(recorded: Any) -> None:
    run = recorded("lightning_fit_with_validation")
    assert (run.returncode, run.stdout) == (0, "done 16\n"), run.stderr[-2000:]
    report = analyze_path(run.offline)
    assert report.run["kind"] == "training" and report.run["steps"] == 16  # 8 an epoch
    assert report.run["served"] is None  # its last validation pass is no serving
    assert report.coverage is not None and report.coverage.served_after_training == 0
    assert "Requests after training:" not in render_text(report)
