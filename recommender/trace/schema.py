"""The slice of the Kineto JSON schema we read, as msgspec structs.

Decoding into these skips every other field (flow ids, shapes, stacks, ...) without building
Python objects for them, which makes loading faster and leaner than a generic JSON parse.
Anything unexpected (an event that is not an object, args that are not a mapping) raises
`msgspec.ValidationError`, and the loader falls back to the generic parser.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Args(msgspec.Struct):
    """The event arguments the analyses use."""

    stream: Any = None
    correlation: Any = None
    bytes: Any = None


class Event(msgspec.Struct):
    """One trace event (only the fields we use)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    args: Args | None = None


class Document(msgspec.Struct):
    """A Kineto trace document."""

    traceEvents: list[msgspec.Raw]  # noqa: N815 - the format's key; decoded one by one
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815


DOCUMENT_DECODER = msgspec.json.Decoder(Document)
EVENT_DECODER = msgspec.json.Decoder(Event)
