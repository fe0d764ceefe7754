"""Login throttling (django-axes): locked out after N wrong passwords, the right password does
not log in during the lock-out, and it does again after the cool-off."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def _login(client: Client, username: str, password: str, address: str = "198.51.100.7") -> Any:
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _fail(client: Client, times: int, address: str = "198.51.100.7") -> None:
    for _ in range(times):
        assert _login(client, "owner", "wrong", address).status_code == 200  # the form again


def test_it_locks_out_after_the_failure_limit_even_for_the_right_password(owner: Any) -> None:
    client = Client()
    _fail(client, settings.AXES_FAILURE_LIMIT - 1)
    reply = _login(client, "owner", "wrong")
    assert reply.status_code == 429  # the limit-th failure locks out
    locked = _login(client, "owner", PASSWORD)
    assert locked.status_code == 429 and not _logged_in(client)
    attempt = AccessAttempt.objects.get(username="owner", ip_address="198.51.100.7")
    # The try during the lock-out counts too (and restarts the cool-off).
    assert attempt.failures_since_start == settings.AXES_FAILURE_LIMIT + 1


def test_a_hundred_wrong_passwords_then_the_right_one_does_not_log_in(owner: Any) -> None:
    client = Client()
    codes = {_login(client, "owner", f"guess-{i}").status_code for i in range(100)}
    assert codes == {200, 429}
    assert _login(client, "owner", PASSWORD).status_code == 429 and not _logged_in(client)


def test_it_lets_the_right_password_in_after_the_cool_off(owner: Any) -> None:
    client = Client()
    _fail(client, settings.AXES_FAILURE_LIMIT - 1)
    assert _login(client, "owner", "wrong").status_code == 429
    earlier = settings.AXES_COOLOFF_TIME + timedelta(seconds=1)
    for attempt in AccessAttempt.objects.all():  # the cool-off has passed
        AccessAttempt.objects.filter(id=attempt.id).update(
            attempt_time=attempt.attempt_time - earlier
        )
    reply = _login(client, "owner", PASSWORD)
    assert reply.status_code == 302 and _logged_in(client)


def test_a_lock_out_is_per_username_and_address(owner: Any, teammate: Any) -> None:
    attacker = Client()
    _fail(attacker, settings.AXES_FAILURE_LIMIT - 1)
    assert _login(attacker, "owner", "wrong").status_code == 429
    colleague = Client()
    assert _login(colleague, "owner", PASSWORD, address="203.0.113.9").status_code == 302
    other_user = Client()
    assert _login(other_user, teammate.username, PASSWORD).status_code == 302


def test_a_success_before_the_limit_clears_the_failures(owner: Any) -> None:
    client = Client()
    _fail(client, settings.AXES_FAILURE_LIMIT - 1)
    assert _login(client, "owner", PASSWORD).status_code == 302
    client.logout()
    _fail(client, settings.AXES_FAILURE_LIMIT - 1)  # would lock out had they been kept
    assert _login(client, "owner", PASSWORD).status_code == 302 and _logged_in(client)
