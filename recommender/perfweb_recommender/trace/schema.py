"""The slice of the Kineto JSON schema we read, as msgspec structs.

Decoding into these skips every other field (flow ids, shapes, stacks, ...) without building
Python objects for them, which makes loading faster and leaner than a generic JSON parse.
Anything unexpected (an event that is not an object, args that are not a mapping) raises
`msgspec.ValidationError`, and the loader falls back to the generic parser.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Args(msgspec.Struct, gc=False):
    """The event arguments the analyses use."""

    stream: Any = None
    correlation: Any = None
    bytes: Any = None


class Event(msgspec.Struct, gc=False):
    """One trace event (only the fields we use)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    args: Args | None = None


class TypedArgs(msgspec.Struct, gc=False):
    """`Args` when every value is an int or absent (the common case)."""

    stream: int | None = None
    correlation: int | None = None
    bytes: int | None = None


class TypedEvent(msgspec.Struct, gc=False):
    """`Event` with the types a well-formed Kineto event has: a batch of these is walked a
    column at a time (`EventSink.add_typed`). A missing name reads "None", as str(None)."""

    ph: str | None = None
    cat: str | None = None
    name: str = "None"
    ts: float | None = None
    dur: float | None = None
    args: TypedArgs | None = None


class Document(msgspec.Struct):
    """A Kineto trace document."""

    traceEvents: list[msgspec.Raw]  # noqa: N815 - the format's key; decoded one by one
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815


DOCUMENT_DECODER = msgspec.json.Decoder(Document)
EVENT_DECODER = msgspec.json.Decoder(Event)
EVENTS_DECODER = msgspec.json.Decoder(list[Event])  # one batch of the streaming reader
TYPED_EVENTS_DECODER = msgspec.json.Decoder(list[TypedEvent])
