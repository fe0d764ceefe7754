"""The one base of the errors a request can cause, at the bottom of the server: each app's
error says its own HTTP status, so the doors that answer requests (`perfweb.api.endpoint`,
the apps' JSON views) turn any of them into a reply without knowing which app raised it."""

from __future__ import annotations


class ClientError(Exception):
    """A request the server cannot honour as asked; the caller's to fix (a 4xx).

    `status` is the HTTP status to answer with, `sentence()` the reply's one sentence
    (`{"error": ...}`; str(error) unless a subclass words it for the caller)."""

    status = 400

    def sentence(self) -> str:
        return str(self)
