from __future__ import annotations

from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "perfweb.fleet"
    label = "fleet"
    verbose_name = "Fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from perfweb.pages.nav import NavLink, register_nav_link

        register_nav_link(NavLink(label="Fleet", url_name="fleet:waste", prefix="/fleet/"))
