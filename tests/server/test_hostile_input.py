"""Hostile and broken input never makes the server answer 5xx (issue 16): a NUL character in
any text field, integers too large for their column, bodies nested without end, URLs with
`%00`. Each is a 4xx with one sentence naming the field, and nothing of it is stored.

Runs against SQLite here and against PostgreSQL (where a NUL used to raise DataError)
through test_postgresql.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from perfweb.runs.models import Run, RunProcess
from perfweb_contract import protocol

from .agent_client import AGENT_ID, RUN_ID, Agent, batch_body, start_body
from .snapshot import stored_state

pytestmark = pytest.mark.django_db
NUL = "\x00"
WORKER = "ffffffffffffffffffffffffffffffff"


def with_value(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of `body` whose item at `path` (keys and indexes) is `value`."""
    body = json.loads(json.dumps(body))
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


def with_key(body: dict[str, Any], path: tuple[Any, ...], key: str) -> dict[str, Any]:
    """A copy of `body` whose object at `path` gets one more key, `key`."""
    body = json.loads(json.dumps(body))
    target = body
    for step in path:
        target = target[step]
    target[key] = "x"
    return body


def assert_rejected(response: Any, status: int, message: str) -> None:
    assert response.status_code == status, response.content
    assert response.json() == {"error": message}
    assert "\n" not in message


START_TEXT_FIELDS = [
    (("name",), "name"),
    (("cwd",), "cwd"),
    (("host",), "host"),
    (("command", 1), "command[1]"),
    (("tags", "dataset"), "tags.dataset"),
    (("facts", "torch.version"), "facts.torch.version"),
    (("devices", 0, "name"), "devices[0].name"),
    (("devices", 0, "uuid"), "devices[0].uuid"),
    (("devices", 0, "kind"), "devices[0].kind"),
    (("devices", 0, "mig"), "devices[0].mig"),
]


@pytest.mark.parametrize(("path", "field"), START_TEXT_FIELDS)
def test_it_rejects_a_start_with_a_nul_character_in_a_text_field_and_stores_no_run(
    agent: Agent, path: tuple[Any, ...], field: str
) -> None:
    body = with_value(start_body(), path, f"imagenet{NUL}v2")
    assert_rejected(agent.post("start", body), 400, f"{field} contains a NUL character")
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("path", "field"),
    [(("tags",), "tags"), (("facts",), "facts"), (("devices", 0), "devices[0]")],
)
def test_it_rejects_a_start_with_a_nul_character_in_a_key(
    agent: Agent, path: tuple[Any, ...], field: str
) -> None:
    body = with_key(start_body(), path, f"data{NUL}set")
    message = f"{field}.'data\\x00set' contains a NUL character"
    assert_rejected(agent.post("start", body), 400, message)
    assert not Run.objects.exists()


def test_it_rejects_a_nul_character_nested_in_a_devices_extra_fields(agent: Agent) -> None:
    body = with_value(start_body(), ("devices", 0, "mig"), {"slices": [{"name": f"1g{NUL}"}]})
    assert_rejected(
        agent.post("start", body), 400, "devices[0].mig.slices[0].name contains a NUL character"
    )
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (("run_id",), "run_id contains a NUL character"),
        (("metrics", 0, "name"), "metrics[0].name contains a NUL character"),
        (("metrics", 0, "device"), "metrics[0].device contains a NUL character"),
        (("facts", "a"), "facts.a contains a NUL character"),
        (("devices",), None),
    ],
)
def test_it_rejects_a_batch_with_a_nul_character_and_stores_nothing_of_it(
    started: Agent, path: tuple[Any, ...], message: str | None
) -> None:
    value: Any = f"gpu{NUL}"
    if message is None:  # a device announced in a batch
        value = [{"key": "gpu:1", "name": f"A100{NUL}"}]
        message = "devices[0].name contains a NUL character"
    before = stored_state()
    for packed in (False, True):
        body = with_value(batch_body(), path, value)
        if packed:
            protocol.pack_batch_arrays(body)
        assert_rejected(started.post("batch", body), 400, message)
    assert stored_state() == before


def test_it_rejects_a_finish_whose_produced_counts_have_a_nul_key(started: Agent) -> None:
    body = {
        "run_id": RUN_ID,
        "agent_id": AGENT_ID,
        "final": True,
        "exit_code": 0,
        "produced": {f"samples{NUL}": 3},
    }
    before = stored_state()
    assert_rejected(
        started.post("finish", body), 400, "produced.'samples\\x00' contains a NUL character"
    )
    assert stored_state() == before
    assert Run.objects.get().status == "running"


def test_a_control_character_in_a_key_is_shown_escaped_in_the_one_line_error(
    started: Agent,
) -> None:
    # Found by the fuzz test on PostgreSQL: a key "\n" put a line break in the error.
    body = {
        "run_id": RUN_ID,
        "agent_id": AGENT_ID,
        "final": True,
        "exit_code": 0,
        "produced": {"steps": 30, "\n": False},
    }
    before = stored_state()
    assert_rejected(started.post("finish", body), 400, "produced.'\\n' is not an integer")
    assert stored_state() == before


def test_it_rejects_a_lone_surrogate_as_invalid_json(agent: Agent) -> None:
    # Python's json writes the escape; no JSON parser may turn it into a string.
    raw = json.dumps(start_body(name="\ud800")).encode()
    response = agent.post("start", None, raw=raw)
    assert response.status_code == 400
    assert response.json()["error"].startswith("the body is not valid JSON (")
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("pid", 2**31, "pid is not a 32-bit integer"),
        ("rank", 2**40, "rank is not a 32-bit integer"),
        ("world_size", 2**63, "world_size is not a 32-bit integer"),
    ],
)
def test_it_rejects_an_integer_too_large_for_its_column(
    agent: Agent, field: str, value: Any, message: str
) -> None:
    assert_rejected(agent.post("start", start_body(**{field: value})), 400, message)
    assert not Run.objects.exists()


def test_it_rejects_a_fact_too_large_for_the_read_apis_json(started: Agent) -> None:
    # The batch decoder keeps big integers exact (start's parser makes them floats).
    before = stored_state()
    response = started.batch(facts={"seed": 2**64})
    assert_rejected(response, 400, "facts.seed is not a 64-bit integer")
    assert stored_state() == before


def test_it_rejects_a_device_power_limit_beyond_a_float(started: Agent) -> None:
    before = stored_state()
    response = started.batch(devices=[{"key": "gpu:1", "power_limit": 10**400}])
    assert_rejected(response, 400, "devices[0].power_limit is not a finite number")
    assert stored_state() == before


def test_it_rejects_an_exit_code_too_large_for_its_column(started: Agent) -> None:
    body = {"run_id": RUN_ID, "agent_id": AGENT_ID, "final": True, "exit_code": 2**33}
    assert_rejected(started.post("finish", body), 400, "exit_code is not a 32-bit integer")
    assert Run.objects.get().status == "running"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


DEEP_BODIES = {
    "start": lambda: start_body(),
    "batch": lambda: batch_body(),
    "heartbeat": lambda: {"run_id": RUN_ID, "agent_id": AGENT_ID},
    "finish": lambda: {"run_id": RUN_ID, "agent_id": AGENT_ID, "final": True, "exit_code": 0},
    "trace": lambda: {"run_id": RUN_ID, "agent_id": AGENT_ID, "name": "w"},
}
TOO_DEEP = f"the body is nested deeper than {protocol.MAX_JSON_DEPTH} levels"


@pytest.mark.parametrize("endpoint", sorted(DEEP_BODIES))
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_it_answers_400_to_an_unknown_key_nested_a_thousand_levels_deep(
    started: Agent, endpoint: str, depth: int
) -> None:
    body = json.dumps(DEEP_BODIES[endpoint]())[:-1] + ', "x": '
    raw = (body + "[" * depth + "]" * depth + "}").encode()
    before = stored_state()
    assert_rejected(started.post(endpoint, None, raw=raw), 400, TOO_DEEP)
    assert stored_state() == before


def test_it_bounds_the_depth_of_every_body_it_parses(started: Agent) -> None:
    body = dict(DEEP_BODIES["heartbeat"](), x=nested(protocol.MAX_JSON_DEPTH - 1))
    assert started.post("heartbeat", body).status_code == 200  # the body object is one more
    body = dict(DEEP_BODIES["heartbeat"](), x=nested(protocol.MAX_JSON_DEPTH))
    assert_rejected(started.post("heartbeat", body), 400, TOO_DEEP)
    assert_rejected(
        started.post("finish", dict(DEEP_BODIES["finish"](), x=nested(protocol.MAX_JSON_DEPTH))),
        400,
        TOO_DEEP,
    )


def test_it_refuses_device_extra_fields_nested_deeper_than_it_stores(agent: Agent) -> None:
    body = with_value(start_body(), ("devices", 0, "mig"), nested(8))
    message = "devices[0].mig[0][0][0][0][0][0][0] is nested deeper than 8 levels"
    assert_rejected(agent.post("start", body), 400, message)
    assert not Run.objects.exists()


def test_a_second_launcher_start_answers_409_and_changes_nothing(
    started: Agent, token: str
) -> None:
    before = stored_state()
    other = Agent(token, agent_id=WORKER)
    response = other.start(command=["python", "evil.py"], cwd="/tmp", host="elsewhere")
    assert_rejected(response, 409, f"run {RUN_ID} already has a launcher (agent {AGENT_ID})")
    assert stored_state() == before
    run = Run.objects.get()
    assert (run.command, run.cwd, run.host) == (
        ["python", "train.py", "--epochs", "3"],
        "/home/me/project",
        "gpu-node-07",
    )


def test_the_launchers_own_start_again_is_a_retry_answered_200(started: Agent) -> None:
    assert started.start(command=["python", "train.py", "--epochs", "4"]).status_code == 200
    assert Run.objects.get().command == ["python", "train.py", "--epochs", "4"]
    assert RunProcess.objects.count() == 1


def test_a_launcher_may_start_a_run_that_its_workers_started_first(
    agent: Agent, token: str
) -> None:
    worker = Agent(token, agent_id=WORKER)
    assert worker.start(role="worker", command=["train.py"], cwd="/w").status_code == 200
    assert agent.start().status_code == 200
    run = Run.objects.get()
    assert (run.command, run.cwd) == (["python", "train.py", "--epochs", "3"], "/home/me/project")
    assert worker.start(role="worker").status_code == 200  # workers are many


READ_PATHS = [
    ("/api/v1/runs/%00", 400),
    ("/api/v1/runs/a%00aaaaaaaaa", 400),
    ("/api/v1/runs/%00/findings", 400),
    ("/api/v1/runs/%00/series?name=gpu.utilization", 400),
    ("/api/v1/runs/%00/timeline", 400),
    ("/api/v1/runs/%E2%98%83%E2%98%83%E2%98%83%E2%98%83", 404),  # not a run id: no query
    ("/api/v1/runs/%E2%98%83%E2%98%83%E2%98%83%E2%98%83/findings", 404),
    (f"/api/v1/runs/{RUN_ID}/series?name=%00", 400),
    (f"/api/v1/runs/{RUN_ID}/series?name=GPU%E2%98%83", 400),
    (f"/api/v1/runs/{RUN_ID}/series?name=gpu.utilization&device=%00", 400),
    (f"/api/v1/runs/{RUN_ID}/series?name=gpu.utilization&device=GPU:0", 400),
    (f"/api/v1/runs/{RUN_ID}/timeline?start=%00", 400),
    ("/api/v1/runs?status=%00", 400),
    ("/api/v1/runs?limit=%00", 400),
    ("/api/v1/waste?project=%00", 400),
    ("/api/v1/waste?tag=%00", 400),
    ("/metrics?x=%00", 400),
]


@pytest.mark.parametrize(("path", "status"), READ_PATHS)
def test_the_read_api_answers_4xx_to_a_nul_in_the_url(
    started: Agent, token: str, path: str, status: int
) -> None:
    response = Client().get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == status, response.content
    assert "error" in response.json()


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/runs/%00/", 400),
        ("/runs/%00/jobs/", 400),
        ("/runs/%E2%98%83%E2%98%83%E2%98%83%E2%98%83/", 404),
        ("/runs/%E2%98%83%E2%98%83%E2%98%83%E2%98%83/jobs/", 404),
        ("/?status=%00", 400),
        ("/fleet/?project=%00", 400),
        ("/jobs/99999999999999999999/", 404),
    ],
)
def test_the_dashboard_answers_4xx_to_a_nul_in_the_url(
    started: Agent, owner: Any, path: str, status: int
) -> None:
    client = Client()
    client.force_login(owner)
    assert client.get(path).status_code == status


def test_a_form_field_with_a_nul_character_is_a_400(started: Agent, owner: Any) -> None:
    client = Client()
    client.force_login(owner)
    response = client.post(f"/runs/{RUN_ID}/jobs/", {"finding_id": "dataloader\x00", "knob": ""})
    assert_rejected(response, 400, "finding_id contains a NUL character")


def test_a_cookie_with_a_nul_character_is_a_400_before_the_session_is_read(
    started: Agent,
) -> None:
    client = Client()
    client.cookies["sessionid"] = "abcdefgh\x00ijkl"
    assert_rejected(client.get("/"), 400, "a cookie contains a NUL character")


def test_the_runner_api_refuses_a_nul_character_in_any_field(started: Agent, token: str) -> None:
    # Every JSON body is checked where it is parsed, so endpoints of other apps are too.
    response = started.client.post(
        "/api/v1/jobs/claim",
        data=json.dumps({"host": "gpu-node-07\x00", "runner_id": "r1"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert_rejected(response, 400, "host contains a NUL character")


@pytest.mark.parametrize("path", ["progress", "result", "fail"])
def test_the_runner_api_answers_404_for_a_job_id_past_any_column(
    started: Agent, token: str, path: str
) -> None:
    response = started.client.post(
        f"/api/v1/jobs/{10**20}/{path}",
        data="{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert_rejected(response, 404, "no such job in this project")
