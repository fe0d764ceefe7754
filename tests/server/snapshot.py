"""What the server has stored, in one comparable value: every row of the tables that ingest
writes, and the files under the trace directory. A rejected request must leave it equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import connection

from perfweb.diagnostics.models import Trace
from perfweb.runs.models import BatchReceipt, Device, Run, RunProcess
from perfweb.series.models import Chunk, Series

MODELS = (Run, RunProcess, Device, BatchReceipt, Series, Chunk, Trace)


def stored_state(trace_dir: Path | None = None) -> dict[str, Any]:
    """Every row (all columns, as the database returns them) of the ingest tables, sorted,
    and the trace directory's files with their sizes."""
    state: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for model in MODELS:
            table = model._meta.db_table
            cursor.execute(f"SELECT * FROM {table} ORDER BY id")
            state[table] = cursor.fetchall()  # tuples; blobs compare by content
    if trace_dir is not None and trace_dir.exists():
        state["files"] = sorted(
            (str(p.relative_to(trace_dir)), p.stat().st_size)
            for p in trace_dir.rglob("*")
            if p.is_file()
        )
    return state
