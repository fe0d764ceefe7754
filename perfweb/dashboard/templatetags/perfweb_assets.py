"""`{% plotly_script %}`: the <script> tag for the locally served Plotly.js (never a CDN).

Any page that extends dashboard/base.html can chart with `{% load perfweb_assets %}` and
`{% plotly_script %}` in its scripts block, without passing a version in its context.
"""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import format_html

from perfweb.dashboard.assets import plotly_version

register = template.Library()


@register.simple_tag
def plotly_script() -> str:
    url = reverse("dashboard:plotly_js", args=[plotly_version()])
    return format_html('<script src="{}"></script>', url)
