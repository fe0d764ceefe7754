"""What every browser test does first: a page that records its own errors (uncaught ones,
and anything the Content-Security-Policy refused), logged in."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import PASSWORD, USER


def log_in(
    page: Any,
    base_url: str,
    *,
    user: str = USER,
    password: str = PASSWORD,
    landing: str | None = None,
) -> None:
    """Submit the login form (opening it unless the page is already on it), then wait until
    the page lands on `landing` (a URL or glob; the runs list by default)."""
    if "/login/" not in page.url:
        page.goto(f"{base_url}/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(landing or f"{base_url}/")


def logged_in_page(
    browser: Any,
    base_url: str,
    *,
    width: int = 1400,
    height: int = 900,
    failed_requests: bool = False,
    user: str = USER,
    password: str = PASSWORD,
) -> tuple[Any, list[str]]:
    """A new page, logged in, and the list its uncaught page errors go to; with
    `failed_requests` also every request that failed, but those the page aborts itself on
    leaving (a runs list's sparklines, ERR_ABORTED)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    record_csp_violations(page, errors)
    if failed_requests:
        record_failed_requests(page, errors)
    log_in(page, base_url, user=user, password=password)
    return page, errors


def record_failed_requests(page: Any, errors: list[str]) -> None:
    """Every request of `page` that fails goes to `errors`, but those the page aborts itself
    on leaving (ERR_ABORTED: a runs list's sparkline fetch still in flight when a run is
    opened)."""
    page.on(
        "requestfailed",
        lambda request: (
            None
            if "ERR_ABORTED" in (request.failure or "")
            else errors.append(f"{request.url}: {request.failure}")
        ),
    )


def record_csp_violations(page: Any, errors: list[str]) -> None:
    """Every Content-Security-Policy violation on `page` goes to `errors`: Chromium's own
    console report ("Refused to execute inline script ...") and the document's
    `securitypolicyviolation` events, read back once per call of `csp_violations`."""

    def console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            errors.append(f"CSP: {message.text}")

    page.on("console", console)
    page.add_init_script(
        "window.__cspViolations = [];"
        "document.addEventListener('securitypolicyviolation', (e) =>"
        " window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));"
    )


def csp_violations(page: Any) -> list[str]:
    """The `securitypolicyviolation` events of the page's current document."""
    return list(page.evaluate("() => window.__cspViolations || []"))
