"""Email through Django's mail settings (EMAIL_HOST, EMAIL_PORT, … from the environment)."""

from __future__ import annotations

import smtplib
from typing import Any

from django import forms
from django.core.mail import EmailMessage, get_connection

from perfweb.alerts import conf
from perfweb.alerts.channels.errors import PermanentError, TransientError
from perfweb.alerts.messages import headline, text_lines

KIND = "email"
LABEL = "Email"
TIMEOUT_S = 10.0


class ConfigForm(forms.Form):
    to = forms.EmailField(label="To", max_length=254)


def send(*, config: dict[str, Any], message: dict[str, Any]) -> str:
    mail = EmailMessage(
        subject=headline(message),
        body="\n".join(text_lines(message)),
        from_email=conf.from_email(),
        to=[config["to"]],
        connection=get_connection(fail_silently=False, timeout=TIMEOUT_S),
    )
    try:
        mail.send(fail_silently=False)
    except smtplib.SMTPRecipientsRefused as error:
        codes = [code for code, _ in error.recipients.values()]
        kind = TransientError if codes and all(400 <= c < 500 for c in codes) else PermanentError
        raise kind(f"recipient refused: {error.recipients}") from None
    except smtplib.SMTPResponseException as error:
        kind = TransientError if 400 <= error.smtp_code < 500 else PermanentError
        raise kind(f"SMTP {error.smtp_code}: {error.smtp_error!r}") from None
    except (TimeoutError, smtplib.SMTPException, OSError) as error:
        raise TransientError(f"SMTP failed: {error}") from None
    return f"sent to {config['to']}"
