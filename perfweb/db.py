"""Cursors for the hot paths that run the same few statements on every request."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np
from django.db import InterfaceError, OperationalError, connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

if TYPE_CHECKING:
    from psycopg.adapt import AdaptersMap

T = TypeVar("T")


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


def first_statement(run: Callable[[CursorWrapper], T]) -> T:
    """Runs a request's first statement, a read, on the prepared cursor without Django's
    health check (CONN_HEALTH_CHECKS), which on PostgreSQL is a round trip of its own
    (`SELECT 1`) before every request's first query: 60 µs of Python and 35 µs of
    PostgreSQL's CPU. If the connection turns out dead, it is closed and the statement runs
    once more on a new one, which is what the health check would have done."""
    checked = (
        connection.vendor != "postgresql"
        or not connection.health_check_enabled
        or connection.health_check_done
        or connection.connection is None
        or connection.in_atomic_block
    )
    if not checked:
        connection.health_check_done = True  # by the statement itself
        try:
            with prepared_cursor() as cursor:
                return run(cursor)
        except (InterfaceError, OperationalError):
            connection.close()
    with prepared_cursor() as cursor:
        return run(cursor)


# --- array parameters in PostgreSQL's binary form --------------------------------------------
# A batch's ~100 chunk rows go to PostgreSQL as one array per column (INSERT ... SELECT FROM
# unnest(...)), in the statement that does the batch's bookkeeping. psycopg would dump a list
# element by element in Python; numpy writes the whole binary array at once.


class PgArray:
    """A one-dimensional array parameter, already in PostgreSQL's binary format (what
    array_send writes): its header, then each element as its length and its bytes."""

    __slots__ = ("data",)
    oid = 0  # the array type's

    def __init__(self, data: bytes) -> None:
        self.data = data


class Float8Array(PgArray):
    oid = 1022  # float8[]


class Int8Array(PgArray):
    oid = 1016  # int8[]


class Int4Array(PgArray):
    oid = 1007  # int4[]


class ByteaArray(PgArray):
    oid = 1001  # bytea[]


_ELEMENTS = {Float8Array: (701, ">f8"), Int8Array: (20, ">i8"), Int4Array: (23, ">i4")}


def _header(element_oid: int, length: int, *, nulls: bool = False) -> bytes:
    if not length:
        return struct.pack(">iii", 0, 0, element_oid)  # no dimensions: '{}'
    return struct.pack(">iiiii", 1, int(nulls), element_oid, length, 1)


def number_array(kind: type[PgArray], values: Sequence[float] | np.ndarray) -> PgArray:
    """float8[], int8[] or int4[] from numbers (no NULLs)."""
    element_oid, dtype = _ELEMENTS[kind]
    numbers = np.asarray(values, dtype=dtype)
    elements = np.empty(len(numbers), dtype=[("length", ">i4"), ("value", dtype)])
    elements["length"] = numbers.itemsize
    elements["value"] = numbers
    return kind(_header(element_oid, len(numbers)) + elements.tobytes())


def bytea_array(values: Sequence[bytes | None]) -> ByteaArray:
    nulls = any(value is None for value in values)
    parts = [_header(17, len(values), nulls=nulls)]
    for value in values:
        parts += (b"\xff\xff\xff\xff",) if value is None else (_LENGTH(len(value)), value)
    return ByteaArray(b"".join(parts))


_LENGTH = struct.Struct(">i").pack


def arrays_on_new_connections(sender: object, connection: BaseDatabaseWrapper, **_: object) -> None:
    """A connection_created receiver (connected in RunsConfig.ready): each new PostgreSQL
    connection learns to send PgArray parameters."""
    if connection.vendor == "postgresql":
        register_array_dumpers(connection.connection.adapters)


def register_array_dumpers(adapters: AdaptersMap) -> None:
    """Teaches a psycopg connection's (or context's) adapters to send PgArray parameters as
    they are, in binary, typed as the array they hold."""
    for kind, dumper in _array_dumpers().items():
        adapters.register_dumper(kind, dumper)


@functools.cache
def _array_dumpers() -> dict[type[PgArray], type]:
    """One psycopg dumper class per PgArray kind, made once (psycopg is imported only on
    PostgreSQL)."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    dumpers: dict[type[PgArray], type] = {}
    for kind in (Float8Array, Int8Array, Int4Array, ByteaArray):

        class ArrayDumper(Dumper):
            format = Format.BINARY
            oid = kind.oid

            def dump(self, obj: PgArray) -> bytes:
                return obj.data

        dumpers[kind] = ArrayDumper
    return dumpers
