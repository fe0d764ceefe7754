"""Delivery channels: identical small modules, one `send()` each, its config form beside it.

A channel module defines KIND, LABEL, `ConfigForm` (the schema of its config, a Django form)
and `send(*, config, message)`, which returns a short outcome on success and raises
`TransientError` (retry with backoff) or `PermanentError` (record, show, stop).
"""

from __future__ import annotations

from types import ModuleType

from perfweb.alerts.channels import email, slack, webhook
from perfweb.alerts.channels.errors import PermanentError, TransientError

CHANNELS: dict[str, ModuleType] = {module.KIND: module for module in (webhook, slack, email)}
CHOICES = [(kind, module.LABEL) for kind, module in CHANNELS.items()]

__all__ = ["CHANNELS", "CHOICES", "PermanentError", "TransientError"]
