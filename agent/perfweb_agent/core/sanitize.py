"""Clean what the agent sends, so that one bad value never costs a whole run.

A NUL character or a lone surrogate (a file name that was not UTF-8, decoded with
surrogateescape) in a tag, a fact, the command or the working directory is valid Python but
no database stores it; a device or series name outside the protocol's pattern makes the
server refuse the whole batch. The agent replaces such characters with U+FFFD, cuts text to
the server's limits, fits names to their patterns, and records that it did: a count and the
fields' names go out as facts (`agent.sanitized`, `agent.sanitized_fields`) and one log line
says which field it was.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from perfweb_agent.core.logger import say_once
from perfweb_contract import protocol

REPLACEMENT = "\ufffd"
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
# The protocol's limits (the server refuses longer text) for the start's and devices' fields;
# the command's text is cut at its own bound.
START_LENGTHS = {
    "name": protocol.RUN_NAME_MAX, "host": protocol.HOST_MAX, "cwd": protocol.CWD_MAX,
    "command": 100_000,
}  # fmt: skip
DEVICE_LENGTHS = {
    "name": protocol.DEVICE_NAME_MAX, "kind": protocol.DEVICE_KIND_MAX,
    "uuid": protocol.DEVICE_UUID_MAX,
}  # fmt: skip
MAX_TEXT = 1000  # anything else: tag and fact values
MAX_KEY = 200  # tag and fact keys
MAX_FIELDS_LISTED = 20  # `agent.sanitized_fields` names at most this many fields
FACT_COUNT = "agent.sanitized"
FACT_FIELDS = "agent.sanitized_fields"


class Sanitizer:
    """Cleans request bodies and remembers what it changed (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.fields: list[str] = []
        self._names: dict[tuple[str, str], tuple[str, str]] = {}  # series key -> clean key

    def facts(self) -> dict[str, Any]:
        """What has been cleaned so far, as facts (empty while nothing was)."""
        with self._lock:
            if not self.count:
                return {}
            return {FACT_COUNT: self.count, FACT_FIELDS: ",".join(self.fields)}

    def text(self, value: str, *, field: str, max_length: int = MAX_TEXT) -> str:
        """`value` without NUL or lone surrogates, at most `max_length` characters."""
        clean = _BAD_CHARS.sub(REPLACEMENT, value)
        if len(clean) > max_length:
            clean = clean[:max_length]
        if clean != value:
            self._record(field)
        return clean

    def body(
        self, body: dict[str, Any], *, field: str = "", limits: dict[str, int] | None = None
    ) -> dict[str, Any]:
        """A copy of a small JSON body (start, finish, facts, devices) with every key and
        every text value cleaned; `limits` bounds the text of some top-level keys (others:
        MAX_TEXT). Numbers, booleans and None pass as they are."""
        limits = limits or {}
        return {
            self._key(k, field): self._value(v, self._path(field, k), limits.get(str(k), MAX_TEXT))
            for k, v in body.items()
        }

    def series_key(self, device: str, name: str) -> tuple[str, str]:
        """A metric's (device, name), fitted to the protocol's patterns (cached per key)."""
        key = (device, name)
        known = self._names.get(key)
        if known is not None:
            return known
        clean = (_device_key(device), _metric_name(name))
        if clean != key:
            self._record(f"metrics.{_printable(device)}/{_printable(name)}")
        if len(self._names) < 10_000:
            self._names[key] = clean
        return clean

    def device(self, device: dict[str, Any]) -> dict[str, Any]:
        """A device entry (`devices[]`): its key fitted to the pattern, its text cleaned."""
        key = device.get("key")
        rest = {k: v for k, v in device.items() if k != "key"}
        clean = self.body(rest, field="devices", limits=DEVICE_LENGTHS)
        if not isinstance(key, str):
            return {"key": key, **clean} if "key" in device else clean
        fitted = _device_key(key)
        if fitted != key:
            self._record(f"devices.{_printable(key)}")
        return {"key": fitted, **clean}

    # ------------------------------------------------------------------ helpers
    def _value(self, value: Any, path: str, max_length: int) -> Any:
        if isinstance(value, str):
            return self.text(value, field=path, max_length=max_length)
        if isinstance(value, dict):
            return self.body(value, field=path)
        if isinstance(value, list):
            return [self._value(item, path, max_length) for item in value]
        return value

    def _key(self, key: Any, path: str) -> str:
        key = str(key)
        return self.text(key, field=self._path(path, key), max_length=MAX_KEY)

    @staticmethod
    def _path(parent: str, key: Any) -> str:
        return f"{parent}.{_printable(str(key))}" if parent else _printable(str(key))

    def _record(self, field: str) -> None:
        with self._lock:
            self.count += 1
            listed = field in self.fields or len(self.fields) >= MAX_FIELDS_LISTED
            if not listed:
                self.fields.append(field)
        say_once(
            f"sanitized:{field}",
            "replaced characters no server stores (NUL, lone surrogates) or cut an over-long "
            "value in %s; the run goes on (fact %s counts these)",
            field,
            FACT_COUNT,
        )


def _printable(text: str) -> str:
    """A field name fit for a log line and a fact: bad characters shown as U+FFFD, short."""
    return _BAD_CHARS.sub(REPLACEMENT, text)[:60]


def _device_key(device: str) -> str:
    return _fit(device, protocol.DEVICE_RE, allowed="[^a-z0-9:_-]", length=32, fallback="device")


def _metric_name(name: str) -> str:
    return _fit(name, protocol.METRIC_NAME_RE, allowed="[^a-z0-9_.]", length=64, fallback="m")


def _fit(value: str, pattern: re.Pattern[str], *, allowed: str, length: int, fallback: str) -> str:
    if pattern.fullmatch(value):
        return value
    clean = re.sub(allowed, "_", value.lower())[:length]
    if pattern.fullmatch(clean):
        return clean
    clean = f"{fallback}_{clean}"[:length]
    return clean if pattern.fullmatch(clean) else fallback
