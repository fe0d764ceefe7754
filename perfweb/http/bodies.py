"""Request bodies in, JSON out: gzip, size limits and one-sentence errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import wraps
from typing import Any, cast

import orjson
from django.http import HttpRequest, HttpResponse
from isal import isal_zlib

from perfweb.errors import ClientError
from perfweb.runs.fields import Invalid, key_path, text
from perfweb_contract.protocol import MAX_BODY_BYTES, MAX_DECOMPRESSED_BYTES, MAX_JSON_DEPTH

# isal's stubs declare `error` an instance; it is the exception class.
_GZIP_ERROR = cast(type[Exception], isal_zlib.error)


class BadRequest(ClientError):
    """A body that cannot be read (too large, not gzip, not JSON, nested too deep)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def json_response(data: Any, status: int = 200) -> HttpResponse:
    body = orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY)
    return HttpResponse(body, status=status, content_type="application/json")


def error_response(message: str, status: int) -> HttpResponse:
    return json_response({"error": message}, status=status)


def read_json(request: HttpRequest, *, unzipped_max: int = MAX_DECOMPRESSED_BYTES) -> Any:
    """The body, un-gzipped and parsed; BadRequest (400/413/415) otherwise."""
    return parse_json(read_body(request, unzipped_max=unzipped_max))


def read_body(request: HttpRequest, *, unzipped_max: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The body's bytes, un-gzipped (at most `unzipped_max` of them); BadRequest (413/415,
    or 400 for broken gzip)."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes", 413)
    body = request.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes", 413)
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding == "gzip":
        return _gunzip(body, limit=unzipped_max)
    if encoding not in ("identity", ""):
        raise BadRequest(f"Content-Encoding {encoding} is not supported (use gzip)", 415)
    return body


def parse_json(body: bytes) -> Any:
    """The parsed body, nested at most MAX_JSON_DEPTH levels, with no string or key that a
    database cannot store (a NUL character, a lone surrogate); BadRequest (400) otherwise,
    naming the field as the readers of perfweb.runs.fields do. Every endpoint that takes a
    JSON body parses it here (the batch's fast decoder aside: its readers check the same)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        if str(error).startswith("depth limit exceeded"):  # orjson's own, at 1024
            raise BadRequest(_TOO_DEEP) from None
        raise BadRequest(f"the body is not valid JSON ({error})") from None
    try:
        json_check(value)
    except Invalid as error:
        raise BadRequest(str(error)) from None
    return value


_TOO_DEEP = f"the body is nested deeper than {MAX_JSON_DEPTH} levels"
_VISITED = {dict, list, str}


def json_check(value: Any) -> None:
    """Raises Invalid if objects and arrays nest deeper than MAX_JSON_DEPTH in `value` (a
    parsed body) or a string or key in it is not `fields.text`. Without recursion; an array
    of numbers costs one pass of C (`map(type, ...)`). A scalar body (`1`, `null`) passes:
    whether the top level must be an object is each body's schema's to say."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        kind = type(item)
        if kind is str:
            text(item, path or "the body")
            continue
        if depth > MAX_JSON_DEPTH:
            raise Invalid(_TOO_DEEP)
        if kind is dict:
            for key, child in item.items():
                child_path = key_path(path, text(key, key_path(path, key)))
                if type(child) in _VISITED:
                    stack.append((child, depth + 1, child_path))
        elif kind is list and not _VISITED.isdisjoint(map(type, item)):
            stack.extend(
                (child, depth + 1, f"{path}[{i}]")
                for i, child in enumerate(item)
                if type(child) in _VISITED
            )


def _gunzip(body: bytes, *, limit: int) -> bytes:
    # ISA-L's inflate, zlib's interface: an agent's batch (110 KB unzipped) in 0.14 ms
    # instead of zlib's 0.40, the same checks (header, CRC, length, the limit on the output).
    decompressor = isal_zlib.decompressobj(wbits=16 + isal_zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, limit + 1)
    except _GZIP_ERROR:
        raise BadRequest("the body is not valid gzip") from None
    if len(data) > limit:
        raise BadRequest(f"the body is larger than {limit} bytes unzipped", 413)
    if not decompressor.eof:
        raise BadRequest("the body is not valid gzip (truncated)")
    return data


def server_timing(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Adds `Server-Timing: app;dur=<ms>`: the view's own time, auth and JSON included (what
    bench/ reports as server time)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        began = time.perf_counter()
        response = view(request, *args, **kwargs)
        response["Server-Timing"] = f"app;dur={1000 * (time.perf_counter() - began):.2f}"
        return response

    return wrapper
