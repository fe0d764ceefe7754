"""`{% nav_links %}`: the navigation links other apps registered (perfweb/pages/nav.py)."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html_join

from perfweb.pages.nav import nav_links as registered_links

register = template.Library()


@register.simple_tag(takes_context=True)
def nav_links(context: dict[str, Any]) -> str:
    request = context.get("request")
    path = request.path if request is not None else ""
    rows = []
    for link in registered_links():
        try:
            url = reverse(link.url_name)
        except NoReverseMatch:
            continue  # an app registered a link it does not serve (yet): leave it out
        active = "active" if path.startswith(link.prefix) else ""
        rows.append((url, active, link.label))
    return format_html_join("", '<a href="{}" class="{}">{}</a>', rows)
