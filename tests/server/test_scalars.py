"""The script's own scalars (`scalar.<name>`), its phases (`run.phase`) and a framework's run
name (`run_name`) through ingest and the read API (docs/protocol.md)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.test import Client

from perfweb.runs.models import BatchReceipt, Run
from perfweb.series.models import Series
from perfweb_contract import protocol
from perfweb_contract.protocol import pack_floats

from .agent_client import RUN_ID, T0, Agent, batch_body

pytestmark = pytest.mark.django_db


def scalar_batch(**fields: Any) -> dict[str, Any]:
    body = batch_body(**fields)
    body["metrics"] += [
        {"device": "rank:0", "name": "scalar.loss", "t": [T0 + 1, T0 + 5], "v": [2.3, 1.9]},
        {"device": "rank:0", "name": "scalar.eval.loss", "t": [T0 + 6], "v": [2.0]},
        {
            "device": "rank:0",
            "name": protocol.RUN_PHASE,
            "t": [T0, T0 + 5.5, T0 + 7],
            "v": [1.0, 2.0, 1.0],
        },
    ]
    return body


def read(path: str, token: str) -> Any:
    response = Client().get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return response.json()


def test_it_stores_the_scripts_scalars_and_phases_and_reads_them_back(
    started: Agent, token: str
) -> None:
    assert started.post("batch", scalar_batch()).status_code == 200
    listed = read(f"/api/v1/runs/{RUN_ID}", token)["series"]
    assert {(s["device"], s["name"], s["count"]) for s in listed} >= {
        ("rank:0", "scalar.loss", 2),
        ("rank:0", "scalar.eval.loss", 1),
        ("rank:0", "run.phase", 3),
    }
    phase = next(s for s in listed if s["name"] == "run.phase")
    assert phase["unit"] == "phase"
    got = read(f"/api/v1/runs/{RUN_ID}/series?name=scalar.loss&name=run.phase", token)
    by_name = {s["name"]: s for s in got["series"]}
    loss = by_name["scalar.loss"]
    assert (loss["t"], loss["v"]) == ([T0 + 1, T0 + 5], [2.3, 1.9])
    assert by_name["run.phase"]["v"] == [1.0, 2.0, 1.0]
    timeline = read(f"/api/v1/runs/{RUN_ID}/timeline", token)["series"]
    assert {"scalar.loss", "scalar.eval.loss", "run.phase"} <= {s["name"] for s in timeline}


@pytest.mark.parametrize(
    ("name", "values", "message"),
    [
        ("scalar.Loss", [1.0], "metrics[2].name does not match"),
        ("scalar.tokens/s", [1.0], "metrics[2].name does not match"),
        ("scalar." + "x" * 58, [1.0], "metrics[2].name does not match"),
        ("scalar.loss", ["low"], "metrics[2].v[0] is not a number"),
        ("scalar.loss", pack_floats([math.nan]), "metrics[2].v[0] is not a finite number"),
    ],
)
def test_it_refuses_a_bad_scalar_with_a_400_and_stores_nothing(
    started: Agent, name: str, values: Any, message: str
) -> None:
    body = batch_body()
    body["metrics"].append({"device": "rank:0", "name": name, "t": [T0], "v": values})
    response = started.post("batch", body)
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)
    assert (BatchReceipt.objects.count(), Series.objects.count()) == (0, 0)


def test_a_batchs_run_name_renames_the_run(started: Agent) -> None:
    assert started.post("batch", batch_body(run_name="bert-tiny-sst")).status_code == 200
    assert Run.objects.get().name == "bert-tiny-sst"
    assert started.post("batch", batch_body(seq=1)).status_code == 200  # no run_name: kept
    assert Run.objects.get().name == "bert-tiny-sst"


def test_a_retried_batch_does_not_rename_the_run_again(started: Agent) -> None:
    assert started.post("batch", batch_body(run_name="first")).status_code == 200
    Run.objects.update(name="renamed by hand")
    reply = started.post("batch", batch_body(run_name="first"))
    assert reply.json()["duplicate"] is True
    assert Run.objects.get().name == "renamed by hand"


@pytest.mark.parametrize(
    ("run_name", "message"),
    [
        ("x" * 201, "run_name is longer than 200 characters"),
        (7, "run_name is not a string"),
        ("bert\x00", "run_name contains a NUL character"),
    ],
)
def test_it_refuses_a_bad_run_name_and_keeps_the_name(
    started: Agent, run_name: Any, message: str
) -> None:
    response = started.post("batch", batch_body(run_name=run_name))
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)
    assert Run.objects.get().name == "resnet50-bs256"
    assert BatchReceipt.objects.count() == 0
