"""Errors the recommender raises on input it cannot use.

The CLI turns every `InputError` into one line on stderr and exit code 2.
"""

from __future__ import annotations


class InputError(Exception):
    """Input that is not what it claims to be: not JSON, not a trace, a truncated gzip."""
