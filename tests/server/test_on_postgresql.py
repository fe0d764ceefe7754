"""What only PostgreSQL has: a server process per connection, which can go away between two
requests. Collected in the PostgreSQL run of test_postgresql.py only (see conftest.py)."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import connection

from perfweb.runs.models import BatchReceipt

from .agent_client import Agent, batch_body
from .test_handlers import wsgi_post

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_batch_is_stored_after_postgresql_dropped_the_connection(started: Agent) -> None:
    from perfweb.wsgi import application

    def post(seq: int) -> str:
        body = json.dumps(batch_body(seq=seq)).encode()
        return wsgi_post(application, "/api/v1/ingest/batch", body, started.token)[0]

    assert post(0) == "200 OK"
    backend = connection.connection.info.backend_pid
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname="postgres"
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [backend])
    assert post(1) == "200 OK"  # the token's read found the connection dead, and read again
    assert connection.connection.info.backend_pid != backend
    assert BatchReceipt.objects.count() == 2
