"""Links in the top navigation, contributed by other apps (Alerts, Jobs, …).

    register_nav_link(NavLink(label="Alerts", url_name="alerts:index", prefix="/alerts/"))

from the app's AppConfig.ready(); base.html shows them after "Runs" on every page, marked
active while the path starts with `prefix`, in the order the apps are installed unless a link
gives an `order` (lower first; 0 by default).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NavLink:
    label: str
    url_name: str
    prefix: str
    order: int = 0


_links: list[NavLink] = []


def register_nav_link(link: NavLink) -> None:
    if link not in _links:
        _links.append(link)


def nav_links() -> list[NavLink]:
    return sorted(_links, key=lambda link: link.order)
