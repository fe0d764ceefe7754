"""Cursors for the hot paths that run the same few statements on every request."""

from __future__ import annotations

from django.db import connection
from django.db.backends.utils import CursorWrapper


def prepared_cursor() -> CursorWrapper:
    """Django's cursor, except that on PostgreSQL it binds parameters on the server, so that
    psycopg prepares a statement once it has run a few times (prepare_threshold) and
    PostgreSQL plans it once per connection instead of on every call. For the ingest path's
    statements, planning was 40–60% of PostgreSQL's CPU for them.

    Only for statements written for it: plain SQL whose parameters PostgreSQL can type from
    their place in it. Prepared statements live on one server connection: a pooler in
    transaction mode in front of PostgreSQL must support them (PgBouncer 1.21+), and a
    migration that changes the type of a column they select needs the web processes
    restarted, as a deploy does."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    from django.db.backends.postgresql.base import ServerBindingCursor

    # As connection.cursor() does, with the other cursor class.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(ServerBindingCursor(connection.connection))
