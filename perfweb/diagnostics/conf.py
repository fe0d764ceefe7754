"""The app's settings: a Django setting wins, else the environment variable, else a default.

PERFWEB_TRACE_DIR          where uploaded traces live (default $PERFWEB_DATA_DIR/traces)
PERFWEB_TRACE_MAX_BYTES    the largest gzip trace the server takes (default 2 GiB)
PERFWEB_DIAGNOSE_INTERVAL  seconds between diagnoses of a running run (default 60)
PERFWEB_DIAGNOSE_WINDOW    seconds of each series a diagnosis reads, up to a run's last
                           sample (default 900)
PERFWEB_TRACE_PARTIAL_RUN_BYTES      bytes that one run's unfinished trace uploads may
                                     declare together (default 1 GiB)
PERFWEB_TRACE_PARTIAL_PROJECT_BYTES  the same for all runs of a project (default 4 GiB)
PERFWEB_TRACE_PARTIAL_TTL            seconds an upload may take from its first chunk before
                                     its chunks are dropped (default 21600, 6 h)
PERFWEB_DIAGNOSIS_MEMORY_MB  memory (MB) one trace's analysis may take in a diagnosis worker
                             (default 1024); a trace over it is analysed in part, and says so
PERFWEB_DIAGNOSE_QUEUED_TTL       seconds a run's pending diagnosis message counts as pending
                                  (no second one is sent meanwhile; default 600)
PERFWEB_DIAGNOSE_PROJECT_PENDING  pending diagnosis messages one project may have at once
                                  (default 16): the rest wait for beat's sweep
PERFWEB_TRACE_RUN_MAX        traces, finished and unfinished, one run may hold (default 256)
PERFWEB_TRACE_RUN_BYTES      bytes of them (default 8 GiB)
PERFWEB_TRACE_PROJECT_MAX    the same for all runs of a project (default 4096)
PERFWEB_TRACE_PROJECT_BYTES  and their bytes (default 64 GiB)
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from perfweb.env import env_int, env_seconds, env_str

DEFAULT_TRACE_MAX_BYTES = 2 * 1024**3
DEFAULT_PARTIAL_RUN_BYTES = 1024**3
DEFAULT_PARTIAL_PROJECT_BYTES = 4 * 1024**3
DEFAULT_PARTIAL_TTL_S = 6 * 3600.0
DEFAULT_DIAGNOSIS_MEMORY_MB = 1024
# A window every 30 min (the agent's default) is 48 a day: a week-long run keeps all of them.
DEFAULT_PROJECT_PENDING = 16
DEFAULT_RUN_TRACES = 256
DEFAULT_RUN_TRACE_BYTES = 8 * 1024**3
DEFAULT_PROJECT_TRACES = 4096
DEFAULT_PROJECT_TRACE_BYTES = 64 * 1024**3


def trace_dir() -> Path:
    configured = getattr(settings, "PERFWEB_TRACE_DIR", None)
    if configured:
        return Path(configured)
    return Path(env_str("PERFWEB_TRACE_DIR", default=str(Path(settings.DATA_DIR) / "traces")))


def trace_max_bytes() -> int:
    configured = getattr(settings, "PERFWEB_TRACE_MAX_BYTES", None)
    if configured is not None:
        return int(configured)
    raw = env_str("PERFWEB_TRACE_MAX_BYTES", default=str(DEFAULT_TRACE_MAX_BYTES))
    if not raw.isdigit() or int(raw) < 1:
        raise ImproperlyConfigured(
            f"PERFWEB_TRACE_MAX_BYTES must be a positive integer, not {raw!r}"
        )
    return int(raw)


def diagnose_interval_s() -> float:
    configured = getattr(settings, "PERFWEB_DIAGNOSE_INTERVAL", None)
    if configured is not None:
        return float(configured)
    return env_seconds("PERFWEB_DIAGNOSE_INTERVAL", default=60.0)


def diagnose_claim_ttl_s() -> float:
    """How long a diagnosis claim lives without renewal (PERFWEB_DIAGNOSE_CLAIM_TTL, 60 s).

    The worker renews it every third of that while it diagnoses, so a killed worker's claim
    runs out within this time and the beat sweep gives the run to another worker."""
    configured = getattr(settings, "PERFWEB_DIAGNOSE_CLAIM_TTL", None)
    if configured is not None:
        return float(configured)
    return env_seconds("PERFWEB_DIAGNOSE_CLAIM_TTL", default=60.0)


def diagnose_queued_ttl_s() -> float:
    configured = getattr(settings, "PERFWEB_DIAGNOSE_QUEUED_TTL", None)
    if configured is not None:
        return float(configured)
    return env_seconds("PERFWEB_DIAGNOSE_QUEUED_TTL", default=600.0)


def diagnose_project_pending() -> int:
    return _bytes("PERFWEB_DIAGNOSE_PROJECT_PENDING", DEFAULT_PROJECT_PENDING)


def diagnose_window_s() -> float:
    configured = getattr(settings, "PERFWEB_DIAGNOSE_WINDOW", None)
    if configured is not None:
        return float(configured)
    return env_seconds("PERFWEB_DIAGNOSE_WINDOW", default=900.0)


def diagnosis_memory_mb() -> int:
    """The memory budget of one trace's analysis (perfweb_recommender.trace.budget)."""
    return _bytes("PERFWEB_DIAGNOSIS_MEMORY_MB", DEFAULT_DIAGNOSIS_MEMORY_MB)


def partial_run_bytes() -> int:
    return _bytes("PERFWEB_TRACE_PARTIAL_RUN_BYTES", DEFAULT_PARTIAL_RUN_BYTES)


def partial_project_bytes() -> int:
    return _bytes("PERFWEB_TRACE_PARTIAL_PROJECT_BYTES", DEFAULT_PARTIAL_PROJECT_BYTES)


def run_traces() -> int:
    return _bytes("PERFWEB_TRACE_RUN_MAX", DEFAULT_RUN_TRACES)


def run_trace_bytes() -> int:
    return _bytes("PERFWEB_TRACE_RUN_BYTES", DEFAULT_RUN_TRACE_BYTES)


def project_traces() -> int:
    return _bytes("PERFWEB_TRACE_PROJECT_MAX", DEFAULT_PROJECT_TRACES)


def project_trace_bytes() -> int:
    return _bytes("PERFWEB_TRACE_PROJECT_BYTES", DEFAULT_PROJECT_TRACE_BYTES)


def partial_ttl_s() -> float:
    configured = getattr(settings, "PERFWEB_TRACE_PARTIAL_TTL", None)
    if configured is not None:
        return float(configured)
    return env_seconds("PERFWEB_TRACE_PARTIAL_TTL", default=DEFAULT_PARTIAL_TTL_S)


def _bytes(name: str, default: int) -> int:
    """A positive whole number (bytes, or a count) from a setting or the environment."""
    configured = getattr(settings, name, None)
    if configured is not None:
        return int(configured)
    return env_int(name, default=default, minimum=1)
