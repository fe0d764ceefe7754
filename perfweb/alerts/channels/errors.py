from __future__ import annotations


class TransientError(Exception):
    """Worth retrying: a timeout, a refused connection, a 5xx, a 429."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(Exception):
    """Retrying will not help: a 4xx, a bad URL, a rejected address. Shown on the channel."""
