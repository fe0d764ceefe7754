"""perfweb.wsgi's handler: the agents' timed endpoints called without middleware, answering
exactly as through Django's whole stack."""

from __future__ import annotations

import io
import json
import logging
import sys
from typing import Any

import pytest
from django.test import Client

from perfweb.handlers import Handler
from perfweb.runs.models import BatchReceipt
from perfweb.series.models import Chunk

from .agent_client import AGENT_ID, RUN_ID, Agent, batch_body, direct_client

pytestmark = pytest.mark.django_db


def wsgi_post(app: Handler, path: str, body: bytes, token: str) -> tuple[str, bytes]:
    """A POST straight through the WSGI interface, as gunicorn makes it."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
    }
    status: list[str] = []
    result = app(environ, lambda line, headers, exc_info=None: status.append(line))
    try:
        return status[0], b"".join(result)
    finally:
        result.close()


# Committed for real: the WSGI handler's request_started closes a connection left in a
# transaction, which would break the test's own on PostgreSQL.
@pytest.mark.django_db(transaction=True)
def test_the_wsgi_application_stores_a_batch_without_the_middleware(
    started: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfweb.wsgi import application

    assert isinstance(application, Handler)

    def no_middleware(request: Any) -> Any:
        raise AssertionError(f"{request.path} went through the middleware")

    monkeypatch.setattr(application, "_middleware_chain", no_middleware)
    body = json.dumps(batch_body(seq=0)).encode()
    status, reply = wsgi_post(application, "/api/v1/ingest/batch", body, started.token)
    assert status == "200 OK"
    assert json.loads(reply)["stored"] == {"samples": 20, "steps": 2}
    assert BatchReceipt.objects.count() == 1 and Chunk.objects.count() == 4
    # Everything else still goes through Django's whole stack.
    with pytest.raises(AssertionError, match="went through the middleware"):
        wsgi_post(application, "/api/v1/ingest/finish", b"{}", started.token)


def answer(client: Client, method: str, path: str, body: Any, **headers: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    call = client.post if method == "POST" else client.get
    response = call(path, data=data, content_type="application/json", **headers)
    is_json = response.get("Content-Type") == "application/json"
    return response.status_code, response.json() if is_json else response.content


CASES = {
    "a batch": ("POST", "batch", batch_body(seq=0), {}),
    "the same batch again": ("POST", "batch", batch_body(seq=0), {}),
    "a batch that is not JSON": ("POST", "batch", b"{not json", {}),
    "a batch with a bad field": ("POST", "batch", batch_body(seq=-1), {}),
    "a batch for a run never started": ("POST", "batch", batch_body(run_id="a" * 32), {}),
    "a batch without a token": ("POST", "batch", batch_body(seq=1), {"HTTP_AUTHORIZATION": ""}),
    "a GET": ("GET", "batch", b"", {}),
    "a batch for another host": ("POST", "batch", batch_body(seq=2), {"HTTP_HOST": "evil.test"}),
    "a heartbeat": ("POST", "heartbeat", {"run_id": RUN_ID, "agent_id": AGENT_ID}, {}),
}


def test_it_answers_as_django_would_through_its_middleware(
    token: str, caplog: pytest.LogCaptureFixture
) -> None:
    answers: dict[str, list[tuple[int, Any]]] = {}
    logged: dict[str, list[tuple[str, int]]] = {}
    for name, client in {"direct": direct_client(), "django": Client()}.items():
        Agent(token, run_id=RUN_ID).start()
        caplog.clear()
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        answers[name] = [
            answer(client, method, f"/api/v1/ingest/{path}", body, **{**headers, **extra})
            for method, path, body, extra in CASES.values()
        ]
        logged[name] = [(r.name, r.levelno) for r in caplog.records if r.name.startswith("django")]
        BatchReceipt.objects.all().delete()
        Chunk.objects.all().delete()
    statuses = dict(zip(CASES, [status for status, _ in answers["direct"]], strict=True))
    assert statuses == {
        "a batch": 200,
        "the same batch again": 200,
        "a batch that is not JSON": 400,
        "a batch with a bad field": 400,
        "a batch for a run never started": 404,
        "a batch without a token": 401,
        "a GET": 405,
        "a batch for another host": 400,
        "a heartbeat": 200,
    }
    assert answers["direct"] == answers["django"]
    assert ("django.security.DisallowedHost", logging.ERROR) in logged["direct"]
    assert logged["direct"] == logged["django"]
