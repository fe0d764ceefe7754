"""Array parameters written in PostgreSQL's binary format (perfweb.db), read back by the
local PostgreSQL server exactly."""

from __future__ import annotations

import math
from collections.abc import Iterator

import psycopg
import pytest

from perfweb.db import (
    Float8Array,
    Int4Array,
    Int8Array,
    bytea_array,
    number_array,
    register_array_dumpers,
)

from .servers import POSTGRES_HOST, POSTGRES_PORT, require_postgres


@pytest.fixture
def postgres() -> Iterator[psycopg.Connection]:
    require_postgres()
    url = f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/postgres"
    with psycopg.connect(url, prepare_threshold=0) as connection:  # prepared from the start
        register_array_dumpers(connection.adapters)
        yield connection


def read_back(connection: psycopg.Connection, value: object, sql_type: str) -> object:
    row = connection.execute(
        f"SELECT %s::{sql_type}, pg_typeof(%s)::text, cardinality(%s)", [value] * 3
    ).fetchone()
    assert row is not None and row[1] == sql_type
    return row[0]


FLOATS = [0.0, -0.0, 1.5, -2.25e-310, 1e300, math.pi, 1764496800.123456]


def test_float8_arrays_arrive_bit_for_bit(postgres: psycopg.Connection) -> None:
    back = read_back(postgres, number_array(Float8Array, FLOATS), "double precision[]")
    assert isinstance(back, list)
    assert [math.copysign(1, x) for x in back] == [math.copysign(1, x) for x in FLOATS]
    assert back == FLOATS


def test_integer_arrays_arrive_exactly(postgres: psycopg.Connection) -> None:
    big = [0, 1, -1, 2**62, -(2**63)]
    assert read_back(postgres, number_array(Int8Array, big), "bigint[]") == big
    small = [0, 7, -(2**31), 2**31 - 1]
    assert read_back(postgres, number_array(Int4Array, small), "integer[]") == small


def test_bytea_arrays_keep_nulls_and_empty_values(postgres: psycopg.Connection) -> None:
    blobs = [b"\x00\xff" * 300, None, b"", b"abc"]
    assert read_back(postgres, bytea_array(blobs), "bytea[]") == blobs
    assert read_back(postgres, bytea_array([b"x", b"y"]), "bytea[]") == [b"x", b"y"]


def test_empty_arrays_unnest_to_no_rows(postgres: psycopg.Connection) -> None:
    rows = postgres.execute(
        "SELECT * FROM unnest(%s, %s, %s)",
        [number_array(Int8Array, []), number_array(Float8Array, []), bytea_array([])],
    ).fetchall()
    assert rows == []
    assert read_back(postgres, number_array(Float8Array, []), "double precision[]") == []
