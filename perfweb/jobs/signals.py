"""Signals other apps may connect to (the diagnostics app re-ranks a run's fixes on it)."""

from __future__ import annotations

from django.dispatch import Signal

# Sent after a job's measurement became a finding's verification.
# kwargs: run (perfweb.runs.models.Run), finding_id (str), verification (FixVerification)
fix_verification_changed = Signal()
