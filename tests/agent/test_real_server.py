"""The agent against a real perfweb server on PostgreSQL: behind a proxy that answers every
request 10 s late, after an outage that outlived the run, with a NUL in a tag, and with a
framework callback that renames the run and sends its phases and scalars."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfweb_agent.core import sanitize
from tests.agent.conftest import ROOT, write_script
from tests.agent.realserver import DelayProxy, RealServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(420)]

UNTIL_TOLD = """
import os, sys, time
deadline = time.monotonic() + 150
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("done")
"""


@pytest.fixture(scope="module")
def real() -> Iterator[RealServer]:
    server = RealServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env.update(
        PERF_AGENT_INTERVAL="0.25",
        PERF_AGENT_FLUSH_INTERVAL="1",
        PERF_AGENT_SPILL_DIR=str(tmp_path / "spill"),
        PERF_AGENT_PROFILE="0",
        PYTHONPATH=str(ROOT),
    )
    return env


def wait_for(what: str, predicate: object, deadline_s: float, real: RealServer) -> float:
    """Seconds until `predicate()` held; fails with the server's log past the deadline."""
    began = time.monotonic()
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() - began < deadline_s, f"{what} not within {deadline_s} s\n" + (
            real.logs()
        )
        time.sleep(0.5)
    return time.monotonic() - began


def test_samples_are_stored_while_the_run_goes_on_behind_a_server_answering_in_10_s(
    real: RealServer, env: dict[str, str], tmp_path: Path
) -> None:
    script = write_script(tmp_path, UNTIL_TOLD)
    stop = tmp_path / "stop"
    proxy = DelayProxy(real.url, delay_s=10.0)
    run_id = "slow" + os.urandom(8).hex()
    env = {**env, "PERF_AGENT_EXIT_DEADLINE": "45"}  # room for the last batch and finish
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "attach",
            "--server",
            proxy.url,
            "--token",
            real.token,
            "--http-timeout",
            "15",
            "--",
            sys.executable,
            str(script),
            str(stop),
        ],
        env={**env, "PERF_AGENT_RUN_ID": run_id},
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        took = wait_for("samples stored", lambda: real.stored_samples(run_id) > 0, 90, real)
        row = real.run_row(run_id)
        assert row is not None and row[0] == "running"
        assert proc.poll() is None  # still going: the data arrived live
        live_samples = real.stored_samples(run_id)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=120)
        proxy.close()
    assert proc.returncode == 0, err
    assert out == "done\n"
    assert took < 60
    row = real.run_row(run_id)
    assert row is not None and row[0] == "finished", err
    (produced,) = real.produced(run_id)
    assert produced["dropped"] == 0
    assert real.stored_samples(run_id) == produced["samples"] > live_samples
    # sampled on time every 0.25 s although each request took 10 s: no gap in the timeline
    rss = real.series(run_id, "process.rss")["series"][0]["t"]
    gaps = [b - a for a, b in zip(rss, rss[1:], strict=False)]
    assert len(rss) >= 30 and max(gaps) < 2.0, max(gaps)
    assert not list((tmp_path / "spill").rglob("*.json*"))


EXITS_7 = "import time\ntime.sleep(1)\nprint('done')\nraise SystemExit(7)\n"


def test_a_run_that_ends_while_a_10_s_server_holds_its_requests_waits_for_its_end_not_lost(
    real: RealServer, env: dict[str, str], tmp_path: Path
) -> None:
    # Every request answered 10 s late and a 2 s exit deadline: when the script exits, each
    # agent still waits on its start, so its finish was never sent.
    script = write_script(tmp_path, EXITS_7)
    proxy = DelayProxy(real.url, delay_s=10.0)
    run_id = "held" + os.urandom(8).hex()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfweb_agent.cli.main",
                "attach",
                "--server",
                proxy.url,
                "--token",
                real.token,
                "--http-timeout",
                "15",
                "--",
                sys.executable,
                str(script),
            ],
            env={**env, "PERF_AGENT_RUN_ID": run_id, "PERF_AGENT_EXIT_DEADLINE": "2"},
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=120,
        )
    finally:
        proxy.close()
    assert (done.returncode, done.stdout) == (7, "done\n"), done.stderr
    assert len(list((tmp_path / "spill" / run_id).rglob("finish.json"))) == 2
    swept = real.manage(
        "shell",
        "-c",
        "from perfweb.runs.services import runs_mark_lost; print(runs_mark_lost(silent_for=0))",
    )
    assert swept.split()[-1] == "0"  # every agent silent, yet not lost: its end is on the way
    assert real.query("SELECT status, exit_code FROM runs_run WHERE run_id = %s", run_id) == [
        ("running", None)
    ]
    sent = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "upload",
            str(tmp_path / "spill"),
            "--server",
            real.url,
            "--token",
            real.token,
            "--delete",
        ],
        env=env,
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert real.query("SELECT status, exit_code FROM runs_run WHERE run_id = %s", run_id) == [
        ("failed", 7)
    ]
    (produced,) = real.produced(run_id)
    assert real.stored_samples(run_id) == produced["samples"] > 0


def test_the_next_attach_on_the_host_sends_what_an_earlier_run_left_behind(
    real: RealServer, env: dict[str, str], tmp_path: Path
) -> None:
    script = write_script(tmp_path, "import time\ntime.sleep(3)\nprint('done')\n")
    proxy = DelayProxy(real.url, delay_s=0)
    proxy.failing = True  # down for the whole first run: 503 for everything
    earlier = "gone" + os.urandom(8).hex()
    try:
        first = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfweb_agent.cli.main",
                "attach",
                "--server",
                proxy.url,
                "--token",
                real.token,
                "--",
                sys.executable,
                str(script),
            ],
            env={**env, "PERF_AGENT_RUN_ID": earlier, "PERF_AGENT_EXIT_DEADLINE": "1"},
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=120,
        )
        assert first.returncode == 0, first.stderr
        assert "the next agent on this host sends them" in first.stderr
        assert real.run_row(earlier) is None
        assert list((tmp_path / "spill" / earlier).rglob("batch-*.json.gz"))
        proxy.failing = False  # the server is back
        later = "next" + os.urandom(8).hex()
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfweb_agent.cli.main",
                "attach",
                "--server",
                proxy.url,
                "--token",
                real.token,
                "--",
                sys.executable,
                str(script),
            ],
            env={**env, "PERF_AGENT_RUN_ID": later},
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=120,
        )
    finally:
        proxy.close()
    assert second.returncode == 0, second.stderr
    row = real.run_row(earlier)
    assert row is not None and row[0] == "finished", second.stderr
    (produced,) = real.produced(earlier)
    assert produced["samples"] > 0
    assert real.stored_samples(earlier) == produced["samples"]
    assert real.run_row(later) is not None
    assert list((tmp_path / "spill").rglob("*")) == []


NUL_TAG = """
import time
import perfweb_agent
perfweb_agent.attach(tags={"dataset": "imagenet\\x00v2"}, name="nul\\x00run")
for _ in range(8):
    time.sleep(0.25)
perfweb_agent.shutdown()
print("done")
"""


def test_a_nul_in_a_tag_still_stores_the_run_and_its_samples_on_postgresql(
    real: RealServer, env: dict[str, str], tmp_path: Path
) -> None:
    script = write_script(tmp_path, NUL_TAG)
    run_id = "nul0" + os.urandom(8).hex()
    done = subprocess.run(
        [sys.executable, str(script)],
        env={
            **env,
            "PERF_AGENT_RUN_ID": run_id,
            "PERF_AGENT_SERVER": real.url,
            "PERF_AGENT_TOKEN": real.token,
        },
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    row = real.run_row(run_id)
    assert row is not None, done.stderr + real.logs()
    status, name, tags, facts = row
    assert status == "finished"
    assert name == "nul\ufffdrun"
    assert tags == {"dataset": "imagenet\ufffdv2"}
    assert facts[sanitize.FACT_COUNT] == 2
    assert set(facts[sanitize.FACT_FIELDS].split(",")) == {"name", "tags.dataset"}
    (produced,) = real.produced(run_id)
    assert real.stored_samples(run_id) == produced["samples"] > 0
    assert "tags.dataset" in done.stderr  # the user is told, in one line


def test_a_lightning_callbacks_run_name_phases_and_scalars_are_stored_on_postgresql(
    real: RealServer, env: dict[str, str], tmp_path: Path
) -> None:
    from tests.agent.test_callbacks import LIGHTNING_TRAINER

    script = write_script(tmp_path, LIGHTNING_TRAINER)
    run_id = "cbk0" + os.urandom(8).hex()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "attach",
            "--server",
            real.url,
            "--token",
            real.token,
            "--",
            sys.executable,
            str(script),
            str(tmp_path / "logs"),
        ],
        env={**env, "PERF_AGENT_RUN_ID": run_id},
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=240,
    )
    assert done.returncode == 0 and done.stdout == "global_step 10\n", done.stderr
    row = real.run_row(run_id)
    assert row is not None, done.stderr + real.logs()
    status, name, _, facts = row
    assert (status, name) == ("finished", "regressor")  # the logger's name, not "train"
    assert facts["run.name_source"] == "lightning logger.name"
    (loss,) = real.series(run_id, "scalar.loss")["series"]
    assert (loss["device"], loss["raw_count"]) == ("rank:0", 5)
    (phase,) = real.series(run_id, "run.phase")["series"]
    assert phase["v"] == [2.0, 0.0, 1.0, 2.0, 1.0, 2.0, 1.0, 0.0]
    assert real.query("SELECT step_count FROM runs_run WHERE run_id = %s", run_id) == [
        (10,)
    ]  # the optimizer's steps, once
