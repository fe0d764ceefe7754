"""Plotly.js, served from the installed `plotly` Python package so the dashboard works offline.

The file is about 5 MB; it is read and gzipped once per process and then answered from
memory with a long cache lifetime (its URL carries the plotly version, so an upgrade
changes the URL and busts every cache).
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import metadata, resources


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes
    etag: str


def plotly_version() -> str:
    return metadata.version("plotly")


@cache
def plotly_js() -> Asset:
    body = (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    return Asset(
        body=body,
        gzipped=gzip.compress(body, compresslevel=6, mtime=0),
        etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"',
    )
