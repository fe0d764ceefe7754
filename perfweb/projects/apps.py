from __future__ import annotations

from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "perfweb.projects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from perfweb.pages.nav import NavLink, register_nav_link

        register_nav_link(
            NavLink(
                label="Tokens & projects", url_name="projects:index", prefix="/projects/", order=100
            )
        )
