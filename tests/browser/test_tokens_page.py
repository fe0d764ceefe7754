"""The Tokens & projects page in Chromium: a newcomer mints a named token (shown once), the
ingest API takes it, revoking it stops it; a member is invited."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import LiveServer
from tests.browser.pages import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]


RUN = {"run_id": "70ce0" + "0" * 27, "agent_id": "a" * 32}


def _post(server: LiveServer, token: str, path: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        f"{server.url}/api/v1/ingest/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def _heartbeat_status(server: LiveServer, token: str) -> int:
    """What the ingest API answers a run's start with this token (401 for a revoked one)."""
    return _post(
        server,
        token,
        "start",
        {
            **RUN,
            "name": "token-check",
            "role": "launcher",
            "command": ["python"],
            "cwd": "/",
            "host": "h",
            "pid": 1,
            "started_at": 1.0e9,
            "tags": {},
            "facts": {},
            "devices": [],
        },
    )


def test_a_newcomer_gets_a_token_on_the_tokens_page(
    browser: Any, perfweb_server: LiveServer, screenshot_dir: Path
) -> None:
    page, errors = logged_in_page(browser, perfweb_server.url, height=1000)
    page.click("nav >> text=Tokens & projects")
    page.wait_for_url("**/projects/")
    section = page.locator("[data-testid=project-demo]")
    section.locator("input[name=label]").fill("laptop")
    section.locator("button", has_text="Create token").click()
    token = page.locator("[data-testid=new-token-value]").inner_text().strip()
    assert token.startswith("pw_")
    assert "not be shown again" in page.locator("[data-testid=new-token]").inner_text()
    page.screenshot(path=str(screenshot_dir / "tokens-new.png"), full_page=True)
    assert _heartbeat_status(perfweb_server, token) == 200
    finish = {**RUN, "ended_at": 1.0e9 + 1, "exit_code": 0, "final": True}
    assert _post(perfweb_server, perfweb_server.token, "finish", finish) == 200  # not left running

    page.goto(f"{perfweb_server.url}/projects/")
    assert token not in page.content()  # shown once
    row = page.locator("[data-testid=project-demo] [data-testid=tokens] tr", has_text="laptop")
    row.locator("button", has_text="Revoke").click()
    page.wait_for_url("**/projects/*")
    row = page.locator("[data-testid=project-demo] [data-testid=tokens] tr", has_text="laptop")
    assert "revoked" in row.inner_text()
    assert _heartbeat_status(perfweb_server, token) == 401

    section = page.locator("[data-testid=project-demo]")
    section.locator("input[name=username]").fill("grace")
    section.locator("button", has_text="Add member").click()
    assert page.locator("[data-testid=invited-password]").inner_text()
    assert "grace" in page.locator("[data-testid=project-demo] [data-testid=members]").inner_text()
    page.screenshot(path=str(screenshot_dir / "tokens-page.png"), full_page=True)
    assert errors == []
