"""Property-based fuzzing (hypothesis) of every ingest and read endpoint (issue 16).

The bodies are real: an agent, run offline in a subprocess with a recorded H100 for NVML,
writes its start, batches and finish in the offline layout (the same code path that sends
them), its batches are also packed as its sender packs them, and a trace's chunk bodies
come from the agent's own chunking. Hypothesis then mutates one of them per request: a
value replaced by a hostile one (NUL, lone surrogates, integers past 32 and 64 bits, NaN,
floats past any range, long strings, deep nesting, wrong types), a key removed or added,
or the bytes themselves cut, flipped, wrongly escaped or wrongly gzipped. For every request:
never a 5xx; a 4xx has one sentence; a rejected request leaves the database (every row of
the ingest tables) and the trace files exactly as they were (the one exception: a trace's
last chunk whose joined file is wrong drops that upload's staged chunks, as documented).

The top level of every POST body is fuzzed apart, on all ten POST endpoints (the agents'
five, the runner's four and the dashboard's `POST /runs/<id>/jobs.json`): empty bodies,
bare scalars, arrays, a real body inside an array, and a real body whose every field has
the wrong type (issue 27).

Derandomized, so that CI runs the same REQUESTS requests every time; it runs against SQLite
here and against PostgreSQL through test_postgresql.py.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfweb_agent.delivery.traces import chunk_bodies
from perfweb_contract import protocol

from .agent_client import direct_client
from .snapshot import stored_state

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]

# Requests per endpoint test: 2,600 per database, 5,200 with the PostgreSQL run.
REQUESTS = {
    "start": 350,
    "batch": 1000,
    "heartbeat": 150,
    "finish": 250,
    "trace": 400,
    "read": 450,
    "top-level": 400,
}
sent: Counter[str] = Counter()

AGENT_SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[2])
from perfweb_agent.core.config import load_settings
from perfweb_agent.runtime.agent import Agent
from tests.agent.nvml_fixtures import H100_LOAD, H100_MIG, RecordedNvml

settings = load_settings(env={}, offline=sys.argv[1], name="fuzz-seed",
                         tags={"team": "vision", "dataset": "imagenet"},
                         interval=0.02, flush_interval=0.08, profile=False)
agent = Agent(settings, nvml_query=RecordedNvml([H100_LOAD, H100_MIG]))
agent.start()
for _ in range(30):
    time.sleep(0.01)
    agent.step()
agent.close(exit_code=0)
"""


@dataclass(frozen=True)
class Corpus:
    """An agent's real bodies: start, batches (plain and packed), finish, heartbeat, and the
    chunks of one trace upload."""

    start: dict[str, Any]
    batches: list[dict[str, Any]]
    finish: dict[str, Any]
    heartbeat: dict[str, Any]
    chunks: list[dict[str, Any]]

    def bodies(self, endpoint: str) -> list[dict[str, Any]]:
        return {
            "start": [self.start],
            "batch": self.batches,
            "heartbeat": [self.heartbeat],
            "finish": [self.finish],
            "trace": self.chunks,
        }[endpoint]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    folder = tmp_path_factory.mktemp("offline")
    script = folder / "agent_run.py"
    script.write_text(textwrap.dedent(AGENT_SCRIPT))
    subprocess.run(
        [sys.executable, str(script), str(folder / "out"), str(ROOT)],
        check=True,
        timeout=60,
        capture_output=True,
        cwd=folder,
    )
    (agent_dir,) = (folder / "out").glob("*/*")
    start = json.loads((agent_dir / "start.json").read_text())
    plain = [json.loads(gzip.decompress(p.read_bytes())) for p in sorted(agent_dir.glob("batch-*"))]
    packed = json.loads(json.dumps(plain))
    for body in packed:
        protocol.pack_batch_arrays(body)
    assert any(m["device"].startswith("gpu:") for b in plain for m in b["metrics"])
    assert any(b.get("steps") for b in plain) and any(b.get("devices") for b in plain)
    ids = {"run_id": start["run_id"], "agent_id": start["agent_id"]}
    trace = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "name": "step"}]}).encode())
    return Corpus(
        start=start,
        batches=plain + packed,
        finish=json.loads((agent_dir / "finish.json").read_text()),
        heartbeat={
            **ids,
            "sent_at": start["started_at"] + 1,
            "unsent": {"requests": 3, "exit_code": 7, "final": True},
        },
        chunks=chunk_bodies(ids["run_id"], ids["agent_id"], "rank0-step1-2", trace, 16),
    )


# --- hostile values -----------------------------------------------------------------------
def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["\x00", "imagenet\x00v2", "\ud800", "a\udfffb", "\U0001f4a5", "line\nbreak", "", " ",
         "%00", "../../etc", "x" * 70, "x" * 300, "y" * 5000, "gpu:0", "rank:0", "gpu.power",
         "launcher", "worker", "gzip+base64", "AAAAAAAA", "AAAAAAAAAAAAAAA=", "0" * 64],
    ),
)  # fmt: skip
HOSTILE_NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2**64, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324, 4102444800.0, 1e300]),
)
HOSTILE_PACKED = st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=6).map(
    protocol.pack_floats
)
SCALARS = st.one_of(st.none(), st.booleans(), HOSTILE_NUMBER, HOSTILE_TEXT, HOSTILE_PACKED)
HOSTILE = st.one_of(
    SCALARS,
    st.recursive(
        SCALARS,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4)
        ),
        max_leaves=10,
    ),
    st.integers(min_value=5, max_value=600).map(nested),  # Python's json writes up to ~900
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key and index path into `value` (arrays: their first, last and one middle item)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list) and value:
        for index in sorted({0, len(value) // 2, len(value) - 1}):
            found += paths(value[index], (*prefix, index))
    return found


def parent(body: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        body = body[step]
    return body


@st.composite
def mutated(draw: st.DrawFn, bodies: list[dict[str, Any]]) -> tuple[bytes, bool]:
    """A real body, mutated (or not): its bytes, and whether they are sent gzipped."""
    body = json.loads(json.dumps(draw(st.sampled_from(bodies))))
    kind = draw(st.sampled_from(["poison"] * 4 + ["replace"] * 2 + ["rekey", "delete", "add"]))
    path = draw(st.sampled_from(paths(body)))
    target, key = parent(body, path), path[-1]
    if kind == "poison":  # the value made hostile in a way that fits its type
        target[key] = draw(poisoned(target[key]))
    elif kind == "replace":
        target[key] = draw(HOSTILE)
    elif kind == "rekey" and isinstance(target, dict):
        target[draw(poisoned(key))] = target.pop(key)
    elif kind == "delete" and isinstance(target, dict):
        del target[key]
    elif kind == "add" and isinstance(target, dict):
        target[draw(st.one_of(HOSTILE_TEXT, poisoned(key)))] = draw(HOSTILE)
    if draw(st.booleans()):  # raw UTF-8, lone surrogates as they are (not valid UTF-8)
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    else:
        raw = json.dumps(body).encode()  # \u escapes, NaN and Infinity as Python writes them
    raw = draw(bytes_mutated(raw))
    gzipped = draw(st.booleans())
    if gzipped:
        raw = gzip.compress(raw, compresslevel=1)
        if draw(st.integers(0, 9)) == 0:  # broken gzip: cut or flipped
            cut = draw(st.integers(0, len(raw) - 1))
            raw = raw[:cut] + bytes([raw[cut] ^ 0x55]) + raw[cut + 1 :]
    return raw, gzipped


@st.composite
def poisoned(draw: st.DrawFn, value: Any) -> Any:
    """`value` made hostile in its own kind: a NUL or a lone surrogate inside a string, an
    integer past its column, a float past any range, an array or object one step wrong."""
    if isinstance(value, str):
        at = draw(st.integers(0, len(value)))
        bad = draw(st.sampled_from(["\x00", "\x00", "\ud800", "\udc00", "\n", "\U0001f4a5"]))
        return value[:at] + bad + value[at:]
    if isinstance(value, bool) or value is None:
        return draw(SCALARS)
    if isinstance(value, int | float):
        return draw(HOSTILE_NUMBER)
    if isinstance(value, list):
        if not value:
            return draw(st.lists(SCALARS, min_size=1, max_size=3))
        at = draw(st.integers(0, len(value) - 1))
        return [*value[:at], draw(poisoned(value[at])), *value[at + 1 :]]
    if not value:
        return {draw(HOSTILE_TEXT): draw(HOSTILE)}
    key = draw(st.sampled_from(sorted(value)))
    return {**value, key: draw(poisoned(value[key]))}


@st.composite
def bytes_mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    kind = draw(st.sampled_from(["none"] * 8 + ["cut", "flip", "insert", "deep"]))
    if kind == "none":
        return raw
    if kind == "deep" and raw.endswith(b"}"):  # an unknown key nested past any parser's limit
        depth = draw(st.sampled_from([33, 1000, 1100, 100_000]))
        return raw[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
    at = draw(st.integers(0, len(raw) - 1))
    if kind == "cut":
        return raw[:at]
    if kind == "flip":
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    return raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]


# --- the checks ---------------------------------------------------------------------------
class Server:
    """Posts and gets as an agent and a reader would, and checks every answer against the
    stored state before it."""

    def __init__(self, token: str, trace_dir: Path) -> None:
        self.client = direct_client()
        self.reader = Client()  # one handler: a new Client loads Django's middleware again
        self.token = token
        self.trace_dir = trace_dir
        self.state = stored_state(trace_dir)

    def post(self, endpoint: str, raw: bytes, *, gzipped: bool) -> Any:
        headers = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}
        if gzipped:
            headers["HTTP_CONTENT_ENCODING"] = "gzip"
        response = self.client.post(
            f"/api/v1/ingest/{endpoint}", data=raw, content_type="application/json", **headers
        )
        sent[endpoint] += 1
        self.check(response, endpoint=endpoint)
        return response

    def get(self, path: str, *, token: str | None) -> Any:
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
        response = self.reader.get(path, **headers)
        sent["read"] += 1
        self.check(response, endpoint="read")
        return response

    def check(self, response: Any, *, endpoint: str) -> None:
        assert response.status_code < 500, response.content[:500]
        after = stored_state(self.trace_dir)
        if response.status_code < 400:
            self.state = after
            return
        if endpoint == "read" and not response["Content-Type"].startswith("application/json"):
            assert response.status_code == 404  # no such URL at all (`%2F` in a run id)
            error = "no route"
        else:
            error = response.json()["error"]
            assert isinstance(error, str) and error and "\n" not in error
        if endpoint == "trace" and after != self.state:
            after = self.staged_chunks_dropped(after, error)
        assert after == self.state, error

    def staged_chunks_dropped(self, after: dict[str, Any], error: str) -> dict[str, Any]:
        """The one rejection that changes what is stored: a last chunk whose joined file is
        wrong drops its upload's staged chunks (send them again). `after` with those back."""
        assert "chunks" in error or "gzip" in error, error
        gone = [f for f in self.state["files"] if f not in after.get("files", [])]
        folders = {str(Path(name).parent) for name, _ in gone}
        assert len(folders) == 1 and "/.partial/" in folders.pop(), gone
        return {**after, "files": self.state["files"]}


@pytest.fixture
def server(token: str, corpus: Corpus, settings: Any, tmp_path: Path) -> Server:
    settings.PERFWEB_TRACE_DIR = str(tmp_path / "traces")
    started = Server(token, tmp_path / "traces")
    started.post("start", json.dumps(corpus.start).encode(), gzipped=False)
    assert started.state["runs_run"], "the real start was not stored"
    return started


FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
    ],
)  # fmt: skip


INGEST_ENDPOINTS = ["start", "batch", "heartbeat", "finish", "trace"]


@pytest.mark.parametrize("endpoint", INGEST_ENDPOINTS)
def test_no_mutation_of_a_real_agent_body_gets_a_5xx_or_stores_half(
    server: Server, corpus: Corpus, endpoint: str
) -> None:
    sent[endpoint] = 0
    bodies = corpus.bodies(endpoint)

    @settings(FUZZ, max_examples=REQUESTS[endpoint])
    @given(request=mutated(bodies))
    def one_request(request: tuple[bytes, bool]) -> None:
        raw, gzipped = request
        server.post(endpoint, raw, gzipped=gzipped)

    one_request()
    assert sent[endpoint] >= REQUESTS[endpoint]


READ_PATHS = [
    "/api/v1/runs?status={text}&limit={text}",
    "/api/v1/runs/{run}",
    "/api/v1/runs/{run}/findings",
    "/api/v1/runs/{run}/series?name={name}&device={device}&start={text}&end={text}&points={text}",
    "/api/v1/runs/{run}/series?name={name}&name={text}",
    "/api/v1/runs/{run}/timeline?start={text}&end={text}&points={text}",
    "/api/v1/runs/{run}/steps/bands?{text}={text}",
    "/api/v1/runs/{run}/traces/{text}",
    "/api/v1/waste?window={text}&tag={text}&project={text}",
    "/metrics?{text}={text}",
]
QUERY_TEXT = st.one_of(
    HOSTILE_TEXT,
    HOSTILE_NUMBER.map(str),
    st.sampled_from(["", "running", "10", "3", "10000", "1764496800", "nan", "inf", "-1"]),
)


@st.composite
def read_request(draw: st.DrawFn, corpus: Corpus) -> tuple[str, bool]:
    """A read API URL with fields drawn from real and hostile values, and whether it is
    sent with the project's token (else with none or a wrong one)."""
    real_run = corpus.start["run_id"]
    names = sorted({m["name"] for b in corpus.batches for m in b["metrics"]})
    devices = sorted({m["device"] for b in corpus.batches for m in b["metrics"]})

    def field(real: list[str]) -> str:
        value = draw(st.one_of(st.sampled_from(real), QUERY_TEXT))
        return quote(value.encode("utf-8", "surrogatepass"), safe="")

    path = draw(st.sampled_from(READ_PATHS)).format(
        run=field([real_run, real_run.upper()]) or real_run,
        name=field(names),
        device=field(devices),
        text=field(["0", "week", "day", "user", "vision"]),
    )
    return path, draw(st.integers(0, 9)) > 0


def test_no_read_of_hostile_urls_gets_a_5xx(server: Server, corpus: Corpus) -> None:
    sent["read"] = 0
    for body in corpus.batches[:3]:
        server.post("batch", json.dumps(body).encode(), gzipped=False)

    @settings(FUZZ, max_examples=REQUESTS["read"])
    @given(request=read_request(corpus))
    def one_request(request: tuple[str, bool]) -> None:
        path, with_token = request
        server.get(path, token=server.token if with_token else "not-a-token")

    one_request()
    assert sent["read"] >= REQUESTS["read"]


# --- the top level of a body: not an object, or an object of the wrong shape --------------
TOP_LEVEL_RAW = [
    b"", b" ", b"\n", b"null", b"true", b"false", b"0", b"1", b"-1", b"1.5", b"1e400",
    b"NaN", b"Infinity", b'""', b'"x"', b'"\\u0000"', b'"\\ud800"', b"[]", b"{}", b"[{}]",
    b"[[]]", b"[1, 2]", b'[null, {"a": 1}]', b'{"a": 1}', b"[" * 40 + b"]" * 40,
]  # fmt: skip
WRONG_TYPED = [None, True, 0, -1, 1.5, "", "x", [], [0], {}, {"a": 1}]


@st.composite
def top_level(draw: st.DrawFn, bodies: list[dict[str, Any]]) -> tuple[bytes, bool]:
    """A body whose top level is wrong: bytes that are no object, a scalar, an array, a real
    body in an array, or a real body with every field of another type; maybe gzipped."""
    kind = draw(st.sampled_from(["raw", "scalar", "array", "wrapped", "retyped"]))
    if kind == "raw":
        raw = draw(st.sampled_from(TOP_LEVEL_RAW))
    elif kind == "scalar":
        raw = json.dumps(draw(SCALARS)).encode()
    elif kind == "array":
        raw = json.dumps(draw(st.lists(HOSTILE, max_size=4))).encode()
    elif kind == "wrapped":
        raw = json.dumps([draw(st.sampled_from(bodies))]).encode()
    else:
        body = dict(draw(st.sampled_from(bodies)))
        for key, value in body.items():
            others = [v for v in WRONG_TYPED if type(v) is not type(value)]
            body[key] = draw(st.sampled_from(others))
        raw = json.dumps(body).encode()
    gzipped = draw(st.booleans())
    return (gzip.compress(raw, compresslevel=1) if gzipped else raw), gzipped


def _job_rows() -> list[tuple[Any, ...]]:
    from perfweb.jobs.models import Job, JobArm

    return [*Job.objects.values_list(), *JobArm.objects.values_list()]


def test_no_top_level_shape_gets_a_5xx_on_any_post_endpoint(
    server: Server, corpus: Corpus, owner: Any
) -> None:
    from perfweb.jobs.models import Job
    from perfweb.runs.models import Run

    run = Run.objects.get(run_id=corpus.start["run_id"])
    job = Job.objects.create(project=run.project, run=run, host="h", knobs={"num_workers": 2})
    member = Client()
    member.force_login(owner)
    jobs = f"/api/v1/jobs/{job.id}"
    claim = {"claim_token": "x" * 43}
    bodies = {
        **{f"/api/v1/ingest/{name}": corpus.bodies(name) for name in INGEST_ENDPOINTS},
        "/api/v1/jobs/claim": [{"host": "h", "runner_id": "r1"}],
        f"{jobs}/progress": [{**claim, "arm": {"round": 1, "arm": "baseline", "step_s": [1.0]}}],
        f"{jobs}/result": [{**claim, "result": {"verdict": "faster"}}],
        f"{jobs}/fail": [{**claim, "reason": "broken"}],
        f"/runs/{run.run_id}/jobs.json": [{"knob": "num_workers=2", "rounds": 5}],
    }
    sent["top-level"] = 0
    statuses: Counter[int] = Counter()

    @settings(FUZZ, max_examples=REQUESTS["top-level"])
    @given(path=st.sampled_from(sorted(bodies)), data=st.data())
    def one_request(path: str, data: st.DataObject) -> None:
        raw, gzipped = data.draw(top_level(bodies[path]))
        headers = {"HTTP_CONTENT_ENCODING": "gzip"} if gzipped else {}
        if path.startswith("/api/"):
            headers["HTTP_AUTHORIZATION"] = f"Bearer {server.token}"
        client = server.client if path.startswith("/api/") else member
        before = (server.state, _job_rows())
        response = client.post(path, data=raw, content_type="application/json", **headers)
        sent["top-level"] += 1
        statuses[response.status_code] += 1
        assert response.status_code < 500, (path, raw[:200], response.content[:500])
        if response.status_code < 400:
            server.state = stored_state(server.trace_dir)
            return
        error = response.json()["error"]
        assert isinstance(error, str) and error and "\n" not in error
        assert (stored_state(server.trace_dir), _job_rows()) == before, (path, error)

    one_request()
    assert sent["top-level"] >= REQUESTS["top-level"]
    assert statuses[400] > 0.9 * sent["top-level"], statuses
