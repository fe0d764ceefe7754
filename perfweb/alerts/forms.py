"""Forms of the alerts pages. A channel's config fields come from its own module's ConfigForm."""

from __future__ import annotations

from typing import Any

from django import forms

from perfweb.alerts.channels import CHANNELS, CHOICES
from perfweb.alerts.models import RULE_KINDS, AlertRule
from perfweb_recommender.conditions import CONDITIONS

PERCENT_KINDS = {"low_utilization", "idle_memory_held", "throttling"}


class RuleForm(forms.ModelForm):
    kind = forms.ChoiceField(choices=RULE_KINDS)

    class Meta:
        model = AlertRule
        fields = ["kind", "threshold", "window_minutes", "scope_tag", "reminder_minutes", "enabled"]
        labels = {
            "window_minutes": "Window (minutes)",
            "scope_tag": "Only runs tagged",
            "reminder_minutes": "Remind every (minutes, 0 = never)",
            "threshold": "Threshold",
        }
        help_texts = {
            "scope_tag": 'empty = all runs; "team=vision" or "team"',
            "threshold": "% utilisation (low utilisation, idle memory), % of samples "
            "(throttling), % slower (step time), % estimated gain (findings); unused: stalled",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind, threshold = data.get("kind"), data.get("threshold")
        window = data.get("window_minutes")
        if kind in PERCENT_KINDS and threshold is not None and not 0 <= threshold <= 100:
            self.add_error("threshold", "A percentage is between 0 and 100.")
        if threshold is not None and threshold < 0:
            self.add_error("threshold", "The threshold cannot be negative.")
        if kind != "finding_gain" and window is not None and window <= 0:
            self.add_error("window_minutes", "The window must be longer than 0 minutes.")
        if (data.get("reminder_minutes") or 0) < 0:
            self.add_error("reminder_minutes", "Use 0 for no reminders.")
        return data


class ChannelForm(forms.Form):
    kind = forms.ChoiceField(choices=CHOICES, widget=forms.HiddenInput)
    name = forms.CharField(max_length=100)
    enabled = forms.BooleanField(required=False, initial=True)


def config_form(
    *, kind: str, data: Any = None, initial: dict[str, Any] | None = None
) -> forms.Form:
    """The channel module's own config form, prefixed so it shares a <form> with ChannelForm."""
    return CHANNELS[kind].ConfigForm(data=data, initial=initial, prefix="config")


class SnoozeForm(forms.Form):
    minutes = forms.FloatField(min_value=0, max_value=7 * 24 * 60)


def threshold_hint(kind: str) -> str:
    return CONDITIONS[kind].threshold_label
