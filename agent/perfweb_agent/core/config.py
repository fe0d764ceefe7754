"""Agent settings: keyword arguments first, then `PERF_AGENT_*` environment variables.

Every setting has an environment variable so that `perf-agent attach` can hand its settings
to the processes it starts (and to every rank of a torchrun job). A malformed value never
raises into the user's script: it is logged once and the default is used.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from perfweb_agent.core.logger import log
from perfweb_contract import protocol

ENV_OFFLINE = "PERF_AGENT_OFFLINE"
ENV_NAME = "PERF_AGENT_NAME"
ENV_INTERVAL = "PERF_AGENT_INTERVAL"
ENV_TAGS = "PERF_AGENT_TAGS"
ENV_FLUSH_INTERVAL = "PERF_AGENT_FLUSH_INTERVAL"
ENV_SPILL_DIR = "PERF_AGENT_SPILL_DIR"
ENV_SPILL_MAX_MB = "PERF_AGENT_SPILL_MAX_MB"
ENV_MAX_BUFFERED = "PERF_AGENT_MAX_BUFFERED_SAMPLES"
ENV_LAUNCHED = "PERF_AGENT_LAUNCHED"
ENV_DISABLE = "PERF_AGENT_DISABLE"
ENV_PROFILE = "PERF_AGENT_PROFILE"
ENV_PROFILE_WARMUP = "PERF_AGENT_PROFILE_WARMUP_STEPS"
# 0: the profiler's windows record no operator shapes (the recommender's replay needs them;
# they cost memory, so an operator-heavy loop's window is cut sooner by its RSS budget)
ENV_PROFILE_SHAPES = "PERF_AGENT_PROFILE_SHAPES"
ENV_FLOPS = "PERF_AGENT_FLOPS"  # 0: no FLOPs count of one step, no CPU peak probe
# where the agent keeps what it measured of this host (the CPU's peak, runtime/flops.py)
ENV_CACHE_DIR = "PERF_AGENT_CACHE_DIR"
ENV_PROFILE_EVERY = "PERF_AGENT_PROFILE_EVERY_S"
ENV_PROFILE_STEPS = "PERF_AGENT_PROFILE_STEPS"
ENV_PROFILE_MAX_MB = "PERF_AGENT_PROFILE_MAX_MB"
ENV_EXIT_DEADLINE = "PERF_AGENT_EXIT_DEADLINE"
ENV_LOG_LEVEL = "PERF_AGENT_LOG_LEVEL"
ENV_BACKOFF_BASE = "PERF_AGENT_BACKOFF_BASE"
ENV_BACKOFF_MAX = "PERF_AGENT_BACKOFF_MAX"
ENV_HTTP_TIMEOUT = "PERF_AGENT_HTTP_TIMEOUT"
DEFAULT_HTTP_TIMEOUT = 15.0


@dataclass(frozen=True)
class Settings:
    """Everything the agent needs to know; build it with :func:`load_settings`."""

    server: str | None = None
    token: str | None = None
    offline: str | None = None
    name: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    tags: dict[str, str] = field(default_factory=dict)
    interval: float = 1.0  # seconds between samples
    flush_interval: float = 5.0  # seconds between batches
    max_batch_samples: int = 20_000  # a batch is sent early once it holds this many
    max_buffered_samples: int = 200_000  # beyond this, new samples are dropped and counted
    max_outbox_batches: int = 32  # batches held in memory before spilling to disk
    spill_dir: str | None = None
    cache_dir: str | None = None  # default: $XDG_CACHE_HOME/perf-agent
    spill_max_bytes: int = 256 * 1024 * 1024
    heartbeat_after: float = 10.0
    http_timeout: float = DEFAULT_HTTP_TIMEOUT  # seconds; a slower server doubles it, to 120
    backoff_base: float = 0.5  # first retry after ~this many seconds, doubling per failure
    backoff_max: float = 30.0
    exit_deadline: float = 5.0  # seconds allowed to flush at exit
    launched: bool = False  # started by `perf-agent attach`: that launcher ends the run
    profile: bool = True
    flops: bool = True  # count one step's FLOPs (agent/perfweb_agent/runtime/flops.py)
    profile_warmup_steps: int = 20
    profile_shapes: bool = True  # operator input shapes in the windows (ENV_PROFILE_SHAPES)
    profile_every_s: float = 1800.0
    profile_steps: int = 5
    profile_max_bytes: int = 50 * 1024 * 1024
    rank: int | None = None  # a spawned rank's index (torchrun ranks come from RANK instead)

    @property
    def online(self) -> bool:
        """True when batches go to a server rather than an offline directory."""
        return self.offline is None and bool(self.server)

    def effective_spill_dir(self) -> str:
        """Where batches wait while the server is unreachable."""
        return self.spill_dir or os.path.join(self.effective_cache_dir(), "spill")

    def effective_cache_dir(self) -> str:
        """Where the agent keeps what it measured of this host between runs."""
        if self.cache_dir:
            return self.cache_dir
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "perf-agent")


def parse_tags(items: Any) -> dict[str, str]:
    """Tags from `K=V` strings, a comma-separated `K=V,K=V` string, or a mapping."""
    if not items:
        return {}
    if isinstance(items, Mapping):
        return {str(k): str(v) for k, v in items.items()}
    if isinstance(items, str):
        items = [part for part in items.split(",") if part.strip()]
    tags: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            log.warning("ignoring tag %r: expected KEY=VALUE", item)
            continue
        tags[key.strip()] = value.strip()
    return tags


def format_tags(tags: Mapping[str, str]) -> str:
    """The `PERF_AGENT_TAGS` form of a tag mapping."""
    return ",".join(f"{k}={v}" for k, v in tags.items())


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number; using %s", name, raw, default)
        return default
    if value <= 0:
        log.warning("%s=%r must be positive; using %s", name, raw, default)
        return default
    return value


def _env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() not in ("0", "false", "no", "off")


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from `env` (default: os.environ), then keyword overrides that are not None."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {
        "server": env.get(protocol.ENV_SERVER) or None,
        "token": env.get(protocol.ENV_TOKEN) or None,
        "offline": env.get(ENV_OFFLINE) or None,
        "name": env.get(ENV_NAME) or None,
        "tags": parse_tags(env.get(ENV_TAGS)),
        "interval": _env_float(env, ENV_INTERVAL, 1.0),
        "flush_interval": _env_float(env, ENV_FLUSH_INTERVAL, 5.0),
        "spill_dir": env.get(ENV_SPILL_DIR) or None,
        "cache_dir": env.get(ENV_CACHE_DIR) or None,
        "spill_max_bytes": int(_env_float(env, ENV_SPILL_MAX_MB, 256.0) * 1024 * 1024),
        "max_buffered_samples": int(_env_float(env, ENV_MAX_BUFFERED, 200_000)),
        "exit_deadline": _env_float(env, ENV_EXIT_DEADLINE, 5.0),
        "backoff_base": _env_float(env, ENV_BACKOFF_BASE, 0.5),
        "backoff_max": _env_float(env, ENV_BACKOFF_MAX, 30.0),
        "http_timeout": _env_float(env, ENV_HTTP_TIMEOUT, DEFAULT_HTTP_TIMEOUT),
        "launched": _env_bool(env, ENV_LAUNCHED, False),
        "profile": _env_bool(env, ENV_PROFILE, True),
        "flops": _env_bool(env, ENV_FLOPS, True),
        "profile_warmup_steps": int(_env_float(env, ENV_PROFILE_WARMUP, 20)),
        "profile_shapes": _env_bool(env, ENV_PROFILE_SHAPES, True),
        "profile_every_s": _env_float(env, ENV_PROFILE_EVERY, 1800.0),
        "profile_steps": int(_env_float(env, ENV_PROFILE_STEPS, 5)),
        "profile_max_bytes": int(_env_float(env, ENV_PROFILE_MAX_MB, 50.0) * 1024 * 1024),
    }
    run_id = env.get(protocol.ENV_RUN_ID)
    if run_id:
        if protocol.RUN_ID_RE.fullmatch(run_id):
            values["run_id"] = run_id
        else:
            log.warning("%s=%r is not a valid run id; using a new one", protocol.ENV_RUN_ID, run_id)
    settings = Settings(**values)
    clean = {k: v for k, v in overrides.items() if v is not None}
    if "tags" in clean:
        clean["tags"] = {**settings.tags, **parse_tags(clean["tags"])}
    settings = replace(settings, **clean)
    # absolute, so that a script that changes directory still writes where it was told
    if settings.offline:
        settings = replace(settings, offline=os.path.abspath(os.fspath(settings.offline)))
    if settings.spill_dir:
        settings = replace(settings, spill_dir=os.path.abspath(settings.spill_dir))
    if settings.cache_dir:
        settings = replace(settings, cache_dir=os.path.abspath(settings.cache_dir))
    return settings


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment variables that reproduce `settings` in a child process."""
    env = {
        protocol.ENV_RUN_ID: settings.run_id,
        ENV_INTERVAL: repr(settings.interval),
        ENV_FLUSH_INTERVAL: repr(settings.flush_interval),
        ENV_HTTP_TIMEOUT: repr(settings.http_timeout),
        ENV_LAUNCHED: "1",
        ENV_PROFILE: "1" if settings.profile else "0",
        ENV_FLOPS: "1" if settings.flops else "0",
    }
    optional = {
        protocol.ENV_SERVER: settings.server,
        protocol.ENV_TOKEN: settings.token,
        ENV_OFFLINE: settings.offline,
        ENV_NAME: settings.name,
        ENV_SPILL_DIR: settings.spill_dir,
        ENV_CACHE_DIR: settings.cache_dir,
        ENV_TAGS: format_tags(settings.tags) if settings.tags else None,
    }
    env.update({k: v for k, v in optional.items() if v})
    return env
