"""What the script tells the agent itself: its scalars (`perfweb_agent.log`), its phase
(`perfweb_agent.phase`) and, from a framework callback, the run's name.

Called from the training thread, so every call is a few dict look-ups and one buffer append;
nothing here raises. A bad name or value is dropped with one warning per name (and counted in
the fact `scalars.dropped`), never passed on for the server to refuse the whole batch.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from perfweb_agent.core.buffer import FactBuffer, SampleBuffer
from perfweb_agent.core.logger import say_once
from perfweb_contract import protocol

FACT_DROPPED = "scalars.dropped"
FACT_PHASE_PREFIX = "phases."
REFUSED_NAMES_HELD = 1_000  # phases.eval_s, phases.eval_count: time and entries per phase


class ScriptSignals:
    """The scalars, phases and run name of one process, into the sender's buffers."""

    def __init__(
        self,
        samples: SampleBuffer,
        facts: FactBuffer,
        *,
        device: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._samples = samples
        self._facts = facts
        self._device = device
        self._clock = clock
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}  # accepted scalar name -> its series name
        self._refused: set[str] = set()  # names outside the pattern: no regex for them again
        self.dropped = 0
        self._phase = "none"
        self._phase_since = 0.0
        self._phase_time: dict[str, float] = {}
        self._phase_count: dict[str, int] = {}
        self.run_name: str | None = None  # taken (once) by the sender into a batch
        self._silent = False  # a forked child (DataLoader worker) records nothing

    def reset_after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held), and silence."""
        self._lock = threading.Lock()
        self._silent = True

    def log(self, scalars: Mapping[str, Any]) -> None:
        """Record each finite number under its name, at the same time; drop the rest."""
        if self._silent:
            return
        now = self._clock()
        taken = []
        for name, value in scalars.items():
            series = self._names.get(name) if type(name) is str else None
            if series is None:
                series = self._admit(name)
                if series is None:
                    continue
            number = value if type(value) is float else _number(value)
            if number is None or not -math.inf < number < math.inf:  # NaN fails both
                self._drop(
                    f"scalar-value:{name}",
                    "perfweb_agent.log(%s=%r): not a finite number; "
                    "dropped (log numbers: int, float, a 1-element tensor)",
                    name,
                    value,
                )
                continue
            taken.append((series, number))
        if taken:
            self._samples.add_at(self._device, now, taken)

    def _admit(self, name: object) -> str | None:
        with self._lock:
            if name in self._refused:
                self.dropped += 1
                self._facts.set(FACT_DROPPED, self.dropped)
                return None
            if not isinstance(name, str) or not protocol.SCALAR_NAME_RE.match(name):
                if isinstance(name, str) and len(self._refused) < REFUSED_NAMES_HELD:
                    self._refused.add(name)
                self._drop(
                    f"scalar-name:{name!r}"[:200],
                    "perfweb_agent.log: %r is not a scalar name "
                    "(1-56 characters a-z 0-9 _ . starting with a letter, e.g. %r); "
                    "dropped",
                    name,
                    _suggest(name),
                )
                return None
            if name not in self._names and len(self._names) >= protocol.MAX_SCALAR_NAMES:
                self._drop(
                    "scalar-names-full",
                    "perfweb_agent.log: more than %d scalar names in "
                    "this process; %r and later new names are dropped",
                    protocol.MAX_SCALAR_NAMES,
                    name,
                )
                return None
            return self._names.setdefault(name, protocol.SCALAR_PREFIX + name)

    def _drop(self, key: str, message: str, *args: object) -> None:
        self.dropped += 1
        self._facts.set(FACT_DROPPED, self.dropped)
        say_once(key, message, *args)

    def phase(self, phase: str) -> None:
        """The script enters `phase` (one of protocol.PHASES) now; the same phase again
        changes nothing."""
        if self._silent:
            return
        code = protocol.PHASES.get(phase) if isinstance(phase, str) else None
        if code is None:
            self._drop(
                f"phase:{phase!r}"[:200],
                "perfweb_agent.phase(%r): not one of %s; ignored",
                phase,
                ", ".join(protocol.PHASES),
            )
            return
        now = self._clock()
        with self._lock:
            previous, since = self._phase, self._phase_since
            if phase == previous:
                return
            self._phase, self._phase_since = phase, now
            if previous != "none":
                self._phase_time[previous] = self._phase_time.get(previous, 0.0) + now - since
                self._facts.set(
                    f"{FACT_PHASE_PREFIX}{previous}_s", round(self._phase_time[previous], 3)
                )
            if phase != "none":
                self._phase_count[phase] = self._phase_count.get(phase, 0) + 1
                self._facts.set(f"{FACT_PHASE_PREFIX}{phase}_count", self._phase_count[phase])
        self._samples.add(self._device, protocol.RUN_PHASE, now, float(code))

    @property
    def current_phase(self) -> str:
        """The phase the script is in (`none` before any was marked)."""
        return self._phase

    def name_run(self, name: str, *, source: str) -> bool:
        """Ask the server to name the run `name` (a framework's run name); True when taken."""
        if not isinstance(name, str) or not name.strip():
            return False
        self.run_name = name.strip()[: protocol.RUN_NAME_MAX]
        self._facts.set("run.name_source", source)
        return True

    def take_run_name(self) -> str | None:
        """The name to send in the next batch, once."""
        name, self.run_name = self.run_name, None
        return name


def _number(value: Any) -> float | None:
    """`value` as a finite float, or None: bools and text are not numbers here."""
    if isinstance(value, (bool, str, bytes)):
        return None
    try:
        number = float(value)  # int, float, numpy scalar, a 1-element tensor (.item())
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


def _suggest(name: object) -> str:
    suggestion = protocol.scalar_name(str(name)) if name is not None else None
    return suggestion or "loss"
