"""Chunked trace upload: chunks wait on disk until the last one arrives, then the file is
joined, checked (size, sha256, gzip) and renamed into the offline layout.

```
<trace dir>/<run>/<agent>/traces/<name>.pt.trace.json.gz          complete traces
<trace dir>/<run>/<agent>/.partial/<name>/<sha256>-<size>-<chunks>-<stride>/<index>.part
<trace dir>/<run>/<agent>/.partial/<name>/<sha256>-<size>-<chunks>-<stride>/.begun
```
(`.begun`'s time is when the upload's first chunk arrived.)
A chunk is written to a temporary name and renamed, so a repeated or concurrent chunk is
stored once and a reader never sees half of one. Every chunk's length is its place in the
declared file (schemas.chunk_stride) and the stride is part of the folder's name, so the
chunks in one folder hold at most its `size` bytes: what the quotas count (quotas.py). The
database learns of a trace only when it is complete (services.trace_chunk_store).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from perfweb.diagnostics import conf
from perfweb.diagnostics.schemas import TraceChunk
from perfweb.errors import ClientError

TRACE_SUFFIX = ".pt.trace.json.gz"
GZIP_MAGIC = b"\x1f\x8b"
PARTIAL = ".partial"
BEGUN = ".begun"  # created with the staging folder: its mtime is when the upload began
COPY_BYTES = 1024 * 1024


class BadTrace(ClientError):
    """The joined chunks are not the file the client described; str() says how."""


def agent_dir(*, run_id: str, agent_id: str) -> Path:
    return conf.trace_dir() / run_id / agent_id


def trace_file(*, run_id: str, agent_id: str, name: str) -> Path:
    return agent_dir(run_id=run_id, agent_id=agent_id) / "traces" / (name + TRACE_SUFFIX)


def staging(chunk: TraceChunk) -> Path:
    """The folder where the chunks of `chunk`'s upload wait."""
    return _staging(chunk)


def _staging(chunk: TraceChunk) -> Path:
    key = f"{chunk.sha256}-{chunk.size}-{chunk.chunks}-{chunk.stride}"
    return agent_dir(run_id=chunk.run_id, agent_id=chunk.agent_id) / PARTIAL / chunk.name / key


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def chunk_stage(chunk: TraceChunk) -> bool:
    """Keeps one chunk; True when every chunk of its trace is now on disk."""
    folder = _staging(chunk)
    _mark_begun(folder)
    _write_atomic(folder / f"{chunk.chunk}.part", chunk.data)
    return all((folder / f"{i}.part").is_file() for i in range(chunk.chunks))


def _mark_begun(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # a later chunk: the upload began earlier
        os.close(os.open(folder / BEGUN, os.O_CREAT | os.O_EXCL | os.O_WRONLY))


def begun_at(folder: Path) -> float:
    """When the upload staged in `folder` began (its first chunk); OSError if it is gone."""
    try:
        return (folder / BEGUN).stat().st_mtime
    except FileNotFoundError:  # staged before .begun existed: its newest chunk's time
        return max((p.stat().st_mtime for p in folder.iterdir()), default=folder.stat().st_mtime)


def chunks_join(chunk: TraceChunk) -> Path:
    """Joins the staged chunks into the trace file (checked); BadTrace if they do not add
    up to the described file, in which case the staged chunks are dropped (send them again)."""
    folder = _staging(chunk)
    target = trace_file(run_id=chunk.run_id, agent_id=chunk.agent_id, name=chunk.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size, head = hashlib.sha256(), 0, b""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            for index in range(chunk.chunks):
                with (folder / f"{index}.part").open("rb") as part:
                    while block := part.read(COPY_BYTES):
                        head = head or block[:2]
                        digest.update(block)
                        size += len(block)
                        out.write(block)
        _check(chunk, size=size, sha256=digest.hexdigest(), head=head)
        os.replace(tmp, target)
    except BadTrace:
        Path(tmp).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _check(chunk: TraceChunk, *, size: int, sha256: str, head: bytes) -> None:
    if size != chunk.size:
        raise BadTrace(f"the {chunk.chunks} chunks hold {size} bytes, not size ({chunk.size})")
    if sha256 != chunk.sha256:
        raise BadTrace("the joined chunks do not match sha256")
    if head != GZIP_MAGIC:
        raise BadTrace("the trace is not gzip-compressed")


def staging_drop(*, run_id: str, agent_id: str, name: str) -> None:
    """Forgets a trace's staged chunks (once it is stored)."""
    shutil.rmtree(agent_dir(run_id=run_id, agent_id=agent_id) / PARTIAL / name, ignore_errors=True)


def staging_folders(*, run_id: str = "*") -> list[Path]:
    """The staging folders of unfinished uploads (of one run, or of all)."""
    return list(conf.trace_dir().glob(f"{run_id}/*/{PARTIAL}/*/*"))


def staging_sweep(*, older_than_s: float, now: float | None = None, run_id: str = "*") -> int:
    """Removes partial uploads begun more than `older_than_s` seconds ago (of one run, or of
    all); returns how many."""
    now = time.time() if now is None else now
    removed = 0
    for folder in staging_folders(run_id=run_id):
        try:
            begun = begun_at(folder)
        except OSError:
            continue
        if now - begun > older_than_s:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
