"""A net under every view: a NUL character in the URL's path, in a query parameter, a form
field or a cookie is a 400 before any view (or the session middleware) runs.

PostgreSQL's text cannot hold a NUL character, so a view that filters on such a value
(`?project=%00`, `/runs/%00/`) would raise DataError: a 500. JSON bodies are checked where
they are parsed (perfweb.http.bodies.parse_json); this checks what Django decodes itself.
Lone surrogates cannot arrive this way: Django decodes URLs and forms as UTF-8 with
replacement.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from perfweb.http.bodies import error_response

NUL = "\x00"
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def nul_guard(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        field = nul_field(request)
        if field is not None:
            return error_response(f"{field} contains a NUL character", 400)
        return get_response(request)

    return middleware


def nul_field(request: HttpRequest) -> str | None:
    """The first part of the request that holds a NUL character, in words; None if none."""
    if NUL in request.path:
        return "the URL's path"
    if any(NUL in value for value in request.COOKIES.values()):
        return "a cookie"
    fields = [request.GET]
    if request.method == "POST" and request.content_type in FORMS:
        fields.append(request.POST)
    for query in fields:
        for key, values in query.lists():
            if NUL in key:
                return "a parameter's name"
            if any(NUL in value for value in values):
                return key if key.isascii() and key.isprintable() else ascii(key)
    return None
