"""The offline directory layout of docs/protocol.md, shared by offline mode, spill and upload.

```
DIR/<run_id>/<agent_id>/start.json
DIR/<run_id>/<agent_id>/batch-00000017.json.gz
DIR/<run_id>/<agent_id>/finish.json
DIR/<run_id>/<agent_id>/traces/<name>.pt.trace.json.gz
```
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import tempfile
from dataclasses import dataclass

START_FILE = "start.json"
FINISH_FILE = "finish.json"
TRACES_DIR = "traces"
BATCH_RE = re.compile(r"^batch-(\d{8,})\.json\.gz$")

KIND_START = "start"
KIND_BATCH = "batch"
KIND_FINISH = "finish"


@dataclass
class Envelope:
    """One request body waiting to be delivered: its kind, seq (batches), and gzip JSON."""

    kind: str
    gz: bytes
    seq: int | None = None
    samples: int = 0  # metric samples + steps inside, for the dropped counter


def agent_dir(root: str, run_id: str, agent_id: str) -> str:
    """The folder holding one agent's files."""
    return os.path.join(root, run_id, agent_id)


def file_name(envelope: Envelope) -> str:
    """The file name an envelope gets in the layout."""
    if envelope.kind == KIND_BATCH:
        return f"batch-{envelope.seq:08d}.json.gz"
    return START_FILE if envelope.kind == KIND_START else FINISH_FILE


def write_atomic(path: str, data: bytes) -> None:
    """Write to a temporary name beside `path` and rename it into place."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_envelope(folder: str, envelope: Envelope) -> str:
    """Store an envelope in `folder` (batches stay gzip, start/finish become plain JSON)."""
    data = envelope.gz if envelope.kind == KIND_BATCH else gzip.decompress(envelope.gz)
    path = os.path.join(folder, file_name(envelope))
    write_atomic(path, data)
    return path


def read_envelope(path: str) -> Envelope:
    """Load a stored file back as an envelope ready to send."""
    with open(path, "rb") as handle:
        data = handle.read()
    name = os.path.basename(path)
    match = BATCH_RE.match(name)
    if match:
        return Envelope(KIND_BATCH, data, int(match.group(1)))
    kind = KIND_START if name == START_FILE else KIND_FINISH
    return Envelope(kind, gzip.compress(data))


def list_agent_files(folder: str) -> list[str]:
    """An agent folder's files in delivery order: start, batches by seq, finish."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    batches = sorted((int(m.group(1)), n) for n in names if (m := BATCH_RE.match(n)))
    ordered = [START_FILE] if START_FILE in names else []
    ordered += [name for _, name in batches]
    if FINISH_FILE in names:
        ordered.append(FINISH_FILE)
    return [os.path.join(folder, name) for name in ordered]


def read_json(path: str) -> dict:
    """A start/finish JSON file, or a gzip batch file, decoded."""
    with open(path, "rb") as handle:
        data = handle.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    parsed = json.loads(data)
    return parsed if isinstance(parsed, dict) else {}
