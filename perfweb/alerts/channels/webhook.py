"""Generic JSON webhook: POSTs the payload documented in docs/webhooks.md."""

from __future__ import annotations

from typing import Any

from django import forms

from perfweb.alerts.channels.addresses import validate_receiver_url
from perfweb.alerts.channels.http import post_json

KIND = "webhook"
LABEL = "Webhook (JSON)"


class ConfigForm(forms.Form):
    url = forms.URLField(
        label="URL",
        max_length=500,
        assume_scheme="https",
        validators=[validate_receiver_url],
    )


def send(*, config: dict[str, Any], message: dict[str, Any]) -> str:
    headers = {"Idempotency-Key": message["id"], "X-Perfweb-Event": message["event"]}
    return post_json(url=config["url"], body=message, headers=headers)
