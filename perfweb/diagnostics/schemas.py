"""The body of `POST /api/v1/ingest/trace` (docs/protocol.md), checked field by field."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from perfweb.runs.fields import Invalid, integer, obj, string, unix_time
from perfweb_contract import protocol

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
ENCODING = "gzip+base64"


@dataclass(frozen=True)
class TraceChunk:
    run_id: str
    agent_id: str
    name: str
    chunk: int
    chunks: int
    size: int
    sha256: str
    data: bytes
    stride: int  # bytes of every chunk but the last: chunk i is [i * stride, i * stride + len)


def parse_trace_chunk(body: Any) -> TraceChunk:
    """A TraceChunk, or Invalid naming the first bad field. The size cap is the caller's."""
    body = obj(body, "the body")
    run_id = string(body, "run_id", pattern=protocol.RUN_ID_RE)
    agent_id = string(body, "agent_id", pattern=protocol.AGENT_ID_RE)
    name = string(body, "name", pattern=NAME_RE, max_length=128)
    if name in (".", ".."):
        raise Invalid("name is not a file name")
    chunk = integer(body, "chunk", required=True, minimum=0)
    chunks = integer(body, "chunks", required=True, minimum=1)
    size = integer(body, "size", required=True, minimum=1)
    sha256 = string(body, "sha256", pattern=SHA256_RE, max_length=64)
    encoding = string(body, "encoding", max_length=32)
    unix_time(body, "sent_at")
    assert run_id and agent_id and name and sha256 and encoding is not None
    assert chunk is not None and chunks is not None and size is not None
    if encoding != ENCODING:
        raise Invalid(f"encoding is not {ENCODING}")
    if chunk >= chunks:
        raise Invalid(f"chunk is not below chunks ({chunks})")
    if chunks > size or chunks * protocol.TRACE_CHUNK_MAX_BYTES < size:
        raise Invalid(
            f"chunks does not fit a size of {size} bytes in chunks of at most "
            f"{protocol.TRACE_CHUNK_MAX_BYTES} bytes"
        )
    data = _decode(string(body, "data", max_length=2 * protocol.TRACE_CHUNK_MAX_BYTES) or "")
    if not data:
        raise Invalid("data is empty")
    if len(data) > protocol.TRACE_CHUNK_MAX_BYTES:
        raise Invalid(f"data holds more than {protocol.TRACE_CHUNK_MAX_BYTES} bytes")
    if len(data) > size:
        raise Invalid(f"data holds more than size ({size}) bytes")
    stride = chunk_stride(chunk=chunk, chunks=chunks, size=size, length=len(data))
    return TraceChunk(
        run_id=run_id,
        agent_id=agent_id,
        name=name,
        chunk=chunk,
        chunks=chunks,
        size=size,
        sha256=sha256.lower(),
        data=data,
        stride=stride,
    )


def chunk_stride(*, chunk: int, chunks: int, size: int, length: int) -> int:
    """The one chunk length (`stride`) of the upload that a chunk of `length` bytes at index
    `chunk` implies: chunks of `stride` bytes, the last one 1..stride bytes, `size` in all.
    Invalid when no stride fits: then the chunk is not its place in the declared file, and
    the chunks of an upload could together hold more than `size` on disk."""
    if chunks == 1 or chunk < chunks - 1:  # a full chunk: the last one holds what is left
        stride = length
    else:  # the last chunk: what is left after chunks - 1 full ones
        stride = (size - length) // (chunks - 1)
        if stride * (chunks - 1) + length != size:
            stride = 0
    if not (stride >= length and stride * (chunks - 1) < size <= stride * chunks):
        raise Invalid(
            f"data holds {length} bytes, which is not chunk {chunk} of {chunks}"
            f" equal chunks of a {size}-byte file"
        )
    if stride > protocol.TRACE_CHUNK_MAX_BYTES:
        raise Invalid(f"the chunks are longer than {protocol.TRACE_CHUNK_MAX_BYTES} bytes")
    return stride


def _decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("data is not base64") from None
