"""What perfweb.runs tells the apps above it, without importing them."""

from __future__ import annotations

from django.dispatch import Signal

# Sent inside the transaction that ends a run (its final finish), with `run_pk`: the series
# app compacts the run's last small chunks once that transaction has committed.
run_ended = Signal()
