"""Readers for fields of a parsed JSON body. Each raises Invalid with one sentence that names
the bad field by its path (`metrics[3].v[17] is not a number`).

Text is refused, not cleaned: a NUL character (PostgreSQL's text and jsonb cannot hold one)
or a lone surrogate (not UTF-8) in any string or object key is `<path> contains a NUL
character` (or `a lone surrogate`). Integers bound for the database fit its columns
(`bits=32` for an IntegerField) and every stored integer fits 64 bits (what the read API's
JSON encoder writes). The agent cleans what it sends, so only a foreign or broken client
ever meets these answers.
"""

from __future__ import annotations

import binascii
import math
import re
from typing import Any

import numpy as np

from perfweb.errors import ClientError

LATEST_TIME = 4102444800.0  # 2100-01-01: anything later is not a Unix time in seconds
NUMBER_TYPES = frozenset({int, float})
SCALAR_TYPES = (str, int, float, bool)
MAX_PLAIN_DEPTH = 8  # nesting of a free-form object the server stores (a device's extras)


class Invalid(ClientError):
    """A request field is wrong; str(error) is the sentence for the client."""


def text(value: str, name: str) -> str:
    """`value` if every database can store it: no NUL character, no lone surrogate."""
    if "\x00" in value:
        raise Invalid(f"{name} contains a NUL character")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Invalid(f"{name} contains a lone surrogate") from None
    return value


def key_path(path: str, key: str) -> str:
    """`path.key`, the key shown escaped when it is not plain printable text."""
    shown = _shown(key)
    return f"{path}.{shown}" if path else shown


def _shown(key: str) -> str:
    return key if key.isascii() and key.isprintable() and key else ascii(key)


def obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{path} is not an object")
    return value


def string(
    body: dict[str, Any],
    key: str,
    *,
    path: str = "",
    pattern: re.Pattern[str] | None = None,
    required: bool = True,
    max_length: int = 1000,
) -> str | None:
    value = body.get(key)
    name = f"{path}{_shown(key)}"
    if value is None:
        if required:
            raise Invalid(f"{name} is missing")
        return None
    if not isinstance(value, str):
        raise Invalid(f"{name} is not a string")
    text(value, name)
    if len(value) > max_length:
        raise Invalid(f"{name} is longer than {max_length} characters")
    if pattern is not None and not pattern.fullmatch(value):
        raise Invalid(f"{name} does not match {pattern.pattern}")
    return value


def integer(
    body: dict[str, Any],
    key: str,
    *,
    path: str = "",
    required: bool = False,
    minimum: int | None = None,
    bits: int = 64,
) -> int | None:
    """An integer that fits a signed `bits`-bit column (an IntegerField is 32)."""
    value = body.get(key)
    name = f"{path}{_shown(key)}"
    if value is None:
        if required:
            raise Invalid(f"{name} is missing")
        return None
    if type(value) is not int:
        raise Invalid(f"{name} is not an integer")
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise Invalid(f"{name} is not a {bits}-bit integer")
    if minimum is not None and value < minimum:
        raise Invalid(f"{name} is less than {minimum}")
    return value


def finite(value: Any, path: str) -> float:
    """A finite JSON number (not a boolean) as a float."""
    if type(value) not in NUMBER_TYPES or not math.isfinite(value):
        raise Invalid(f"{path} is not a finite number")
    return float(value)


def whole(value: Any, path: str, low: int, high: int) -> int:
    """A JSON integer (not a boolean) in `low`..`high`."""
    if type(value) is not int or not low <= value <= high:
        raise Invalid(f"{path} must be a whole number in {low}..{high}")
    return value


def unix_time(
    body: dict[str, Any], key: str, *, path: str = "", required: bool = False
) -> float | None:
    value = body.get(key)
    name = f"{path}{_shown(key)}"
    if value is None:
        if required:
            raise Invalid(f"{name} is missing")
        return None
    if type(value) not in NUMBER_TYPES or not math.isfinite(value):
        raise Invalid(f"{name} is not a number")
    if not 0 <= value < LATEST_TIME:
        raise Invalid(f"{name} is not a Unix time in seconds")
    return float(value)


def flat_dict(body: dict[str, Any], key: str, *, path: str = "") -> dict[str, Any]:
    """An optional {"key": scalar} object."""
    value = body.get(key)
    if value is None:
        return {}
    name = f"{path}{_shown(key)}"
    if not isinstance(value, dict):
        raise Invalid(f"{name} is not an object")
    for item_key, item in value.items():
        item_path = key_path(name, item_key)
        text(item_key, item_path)
        if item is not None and not isinstance(item, SCALAR_TYPES):
            raise Invalid(f"{item_path} is not a string, number, boolean or null")
        _scalar(item, item_path)
    return value


def plain(value: Any, path: str, *, depth: int = MAX_PLAIN_DEPTH) -> Any:
    """Any JSON value the server may store as it came (a device's extra fields): its strings
    and keys text, its integers 64-bit, nested at most `depth` levels."""
    if isinstance(value, dict | list):
        if depth <= 0:
            raise Invalid(f"{path} is nested deeper than {MAX_PLAIN_DEPTH} levels")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str):
                item_path = key_path(path, text(key, key_path(path, key)))
            else:
                item_path = f"{path}[{key}]"
            plain(item, item_path, depth=depth - 1)
        return value
    return _scalar(value, path)


def _scalar(value: Any, path: str) -> Any:
    if isinstance(value, str):
        text(value, path)
    elif type(value) is int and not -(2**63) <= value < 2**63:
        raise Invalid(f"{path} is not a 64-bit integer")
    return value


def numbers(value: Any, path: str, *, integers: bool = False) -> np.ndarray:
    """A JSON array of finite numbers, or its packed form (a string: see `packed`), as
    float64, checked at C speed; the first bad entry is named only when there is one."""
    if isinstance(value, str):
        return _checked(packed(value, path), path, integers=integers)
    if not isinstance(value, list):
        raise Invalid(f"{path} is not an array")
    allowed = frozenset({int}) if integers else NUMBER_TYPES
    if not set(map(type, value)) <= allowed:
        index = next(i for i, item in enumerate(value) if type(item) not in allowed)
        raise Invalid(f"{path}[{index}] is not {'an integer' if integers else 'a number'}")
    try:
        array = np.asarray(value, dtype=np.float64)
    except OverflowError:
        array = np.asarray([float("inf") if abs(x) > 1e308 else x for x in value], np.float64)
    return _checked(array, path, integers=False)


def packed(value: str, path: str) -> np.ndarray:
    """A packed array's values: `value` is the standard base64 (with padding) of
    little-endian float64s, as perfweb_contract.protocol.pack_floats writes them."""
    try:
        data = binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"{path} is neither an array nor base64 of float64 values") from None
    return float64s(data, path)


def float64s(data: bytes, path: str) -> np.ndarray:
    """Little-endian float64s from their bytes (a packed array, once out of base64)."""
    if len(data) % 8:
        raise Invalid(f"{path} holds {len(data)} bytes, not a whole number of float64 values")
    return np.frombuffer(data, dtype="<f8")


def _checked(array: np.ndarray, path: str, *, integers: bool) -> np.ndarray:
    finite = np.isfinite(array)
    if not finite.all():
        raise Invalid(f"{path}[{int(np.argmin(finite))}] is not a finite number")
    if integers:
        whole = array == np.floor(array)
        if not whole.all():
            raise Invalid(f"{path}[{int(np.argmin(whole))}] is not an integer")
    return array


def times(value: Any, path: str) -> np.ndarray:
    array = numbers(value, path)
    good = (array >= 0) & (array < LATEST_TIME)
    if not good.all():
        raise Invalid(f"{path}[{int(np.argmin(good))}] is not a Unix time in seconds")
    return array


def same_length(arrays: dict[str, np.ndarray], path: str) -> int:
    lengths = {name: len(array) for name, array in arrays.items()}
    first = next(iter(lengths))
    for name, length in lengths.items():
        if length != lengths[first]:
            raise Invalid(
                f"{path}{name} has {length} entries but {path}{first} has {lengths[first]}"
            )
    return lengths[first]
