"""Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat): text plus blocks."""

from __future__ import annotations

from typing import Any

from django import forms

from perfweb.alerts.channels.addresses import validate_receiver_url
from perfweb.alerts.channels.http import post_json
from perfweb.alerts.messages import headline, text_lines

KIND = "slack"
LABEL = "Slack incoming webhook"


class ConfigForm(forms.Form):
    url = forms.URLField(
        label="Incoming webhook URL",
        max_length=500,
        assume_scheme="https",
        validators=[validate_receiver_url],
    )


def send(*, config: dict[str, Any], message: dict[str, Any]) -> str:
    body = "\n".join(text_lines(message)[1:])
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline(message)}*"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": body}},
    ]
    return post_json(url=config["url"], body={"text": headline(message), "blocks": blocks})
