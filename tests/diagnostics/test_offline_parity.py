"""The server's adapter agrees with the offline one: a real agent's offline directory
(`perf-agent attach --offline` of the input-bound example), sent with `perf-agent upload`'s
own code through the ingest and trace endpoints, diagnoses on the server as
`python -m perfweb_recommender analyze DIR` does on the directory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from perfweb.diagnostics.models import Finding, Trace
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.runs.models import Run
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.upload import upload
from perfweb_recommender.api import analyze_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def offline_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("offline")
    perf_agent = Path(sys.executable).with_name("perf-agent")
    done = subprocess.run(
        [
            str(perf_agent),
            "attach",
            "--offline",
            str(folder),
            "--",
            sys.executable,
            "examples/bottleneck_dataloader.py",
            "--steps",
            "30",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    yield folder


def client_post(client: Client) -> Any:
    """`perfweb_agent.delivery.transport.post`, but through Django's test client."""

    def post(server: str, path: str, token: str | None, gz_body: bytes, timeout: float) -> Any:
        reply = client.post(
            path,
            data=gz_body,
            content_type="application/json",
            HTTP_CONTENT_ENCODING="gzip",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        return transport.Reply(reply.status_code, reply.json())

    return post


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_server_diagnoses_an_uploaded_offline_run_as_the_cli_does(
    offline_dir: Path, token: str
) -> None:
    report = upload(str(offline_dir), server="", token=token, post=client_post(Client()))
    assert not report.failed, report.failed
    run = Run.objects.get()
    assert Trace.objects.filter(run=run).count() == report.traces >= 1
    diagnose_run_task(run.id)
    stored = list(Finding.objects.filter(run=run).order_by("rank"))
    analysed = analyze_path(offline_dir)
    offline = [*analysed.findings, *analysed.host_conditions]  # stored together, fixes first
    assert stored[0].rule_id == offline[0].id == "dataloader.num_workers"
    assert [f.rule_id for f in stored] == [f.id for f in offline]
    for ours, theirs in zip(stored, offline, strict=True):
        assert ours.estimated_gain == pytest.approx(theirs.estimated_gain, abs=0.02), ours.rule_id
        assert ours.confidence == pytest.approx(theirs.confidence, abs=0.01), ours.rule_id
