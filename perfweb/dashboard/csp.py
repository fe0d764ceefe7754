"""The Content-Security-Policy of every response (issue 27): scripts from this origin only.

Every script the dashboard runs is a static file (the Plotly bundle too, served by
`dashboard:plotly_js`); the page's own data travels in `<script type="application/json">`
blocks (`json_script`), which a browser never executes. So no inline script and no eval is
allowed, and a script a project member smuggled into a page (a run name, a tag) could not
run even if an escape were missed. Styles may be inline: Plotly sets style attributes and
injects its own stylesheet as it draws, and a style cannot run code. Nothing but this
origin is fetched or framed (Perfetto is opened in its own window, not fetched or framed).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
HEADER = "Content-Security-Policy"


def content_security_policy(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware: POLICY on every response that has none of its own."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if HEADER not in response:
            response[HEADER] = POLICY
        return response

    return middleware
