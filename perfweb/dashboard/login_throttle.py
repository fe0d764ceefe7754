"""Login throttling with django-axes: after PERFWEB_LOGIN_FAILURE_LIMIT wrong passwords for
one username from one address, that pair is locked out for PERFWEB_LOGIN_COOLOFF seconds;
during the lock-out even the right password does not log in (the answer is 429).

The lock-out key is (username, IP address), so nobody can lock a colleague out from another
machine, and one address cannot guess one account's password faster than the limit allows.
Behind a reverse proxy every request has the proxy's address: the key then is per username.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.http import HttpRequest


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lock-out check for logins that come with a request (the login page).

    `authenticate()` without a request (Django's test client `login()`, management
    commands) is not a login over the network: nothing to throttle, and axes would raise.
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        super().authenticate(request, username=username, password=password, **kwargs)
        return None
