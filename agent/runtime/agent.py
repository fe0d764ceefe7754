"""The agent inside one process: wires settings, collectors, torch hooks and the sender."""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from perfweb_agent.collectors.host import HostCollector, HostSource
from perfweb_agent.collectors.nvml import NvmlCollector, Query
from perfweb_agent.collectors.process import ProcessCollector, ProcessSource, child_pids
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.sender import PostFn, Sender
from perfweb_agent.runtime import importhook, torch_state
from perfweb_agent.runtime.buffer import Sample
from perfweb_agent.runtime.config import Settings
from perfweb_agent.runtime.logger import log, say_once
from perfweb_agent.runtime.scalars import ScriptSignals
from perfweb_agent.runtime.steps import StepTimer
from perfweb_agent.runtime.torch_patches import Counters, TorchPatches
from perfweb_contract import protocol

FACTS_EVERY_TICKS = 5
BATCH_SIZES_HELD = 100_000  # between two ticks; beyond, the oldest go (a bound, not a goal)
TORCHRUN_MAINS = ("torch.distributed.run", "torch.distributed.launch")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else None


class Agent:
    """One agent: `start()`, then `step()` from the script if it likes, then `close()`."""

    def __init__(
        self,
        settings: Settings,
        *,
        role: str = protocol.ROLE_WORKER,
        command: list[str] | None = None,
        nvml_query: Query | None = None,
        process_source: ProcessSource | None = None,
        host_source: HostSource | None = None,
        post: PostFn = transport.post,
        collect: bool = True,
    ) -> None:
        self.settings = settings
        self.role = role
        self.agent_id = uuid.uuid4().hex
        self.pid = os.getpid()
        self.command = command if command is not None else list(getattr(sys, "orig_argv", sys.argv))
        self.rank = settings.rank if settings.rank is not None else _env_int("RANK")
        self.exit_code: int | None = None
        self.collecting = collect
        self.sender = Sender(
            settings, self.agent_id, tick=self._tick, on_command=self._on_command,
            network_work=self._ship_traces, post=post,
        )
        self.sender.rank = self.rank
        self._steps_device = protocol.rank_device(self.rank)
        # (end time, batch size) of each step: a deque append in the training thread, moved
        # into the sample buffer on the agent's tick
        self._batch_sizes: deque[tuple[float, float]] = deque(maxlen=BATCH_SIZES_HELD)
        self.timer = StepTimer(self.sender.steps, batch_sink=self._batch_sizes.append)
        self.signals = ScriptSignals(
            self.sender.samples, self.sender.facts, device=self._steps_device
        )
        self.sender.run_name = self.signals.take_run_name
        self.counters = Counters()
        self.patches = TorchPatches(self.timer, self.sender.facts, self.counters)
        # Every process of a run names its devices so that no two share a series.
        self.naming = protocol.DeviceNaming.from_env(os.environ)
        if settings.rank is not None:  # a spawned rank: no RANK in its environment
            self.naming = protocol.DeviceNaming(rank=settings.rank)
        self.process = ProcessCollector(process_source, naming=self.naming)
        self.host = HostCollector(host_source, device=self.naming.host())
        self.nvml = NvmlCollector(nvml_query, pids=self._job_pids, naming=self.naming)
        # In a torchrun job every rank sees every GPU of its host: one of them (local rank 0)
        # samples them all, instead of each rank sending the same numbers again.
        # A spawned rank leaves them to the process that spawned it (which has an agent too).
        self.samples_gpus = _env_int("LOCAL_RANK") in (None, 0) and settings.rank is None
        self.profiler: Any = None
        self._ticks = 0
        self._closed = False
        self._cancel_hook: Callable[[], None] = lambda: None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Queue `start`, hook torch once the script imports it, start the thread."""
        if self.collecting:
            self._cancel_hook = importhook.when_imported("torch", self._torch_imported)
        self.sender.start(self.start_body())
        atexit.register(self.close)

    def close(self, exit_code: int | None = None, deadline_s: float | None = None) -> None:
        """Flush and send `finish` (final for launchers and standalone scripts). Idempotent."""
        with self._lock:
            if self._closed or os.getpid() != self.pid:
                return
            self._closed = True
        self._cancel_hook()
        if exit_code is not None:
            self.exit_code = exit_code
        if self.profiler is not None:
            self.profiler.close()
        self.timer.finish()
        self.sender.close(self.finish_body, deadline_s)

    def _take_batch_sizes(self) -> list[Sample]:
        """The steps' batch sizes since the last tick, as samples on the steps' device."""
        sizes, taken = self._batch_sizes, []
        while sizes:
            wall_time, size = sizes.popleft()
            taken.append((self._steps_device, protocol.STEP_BATCH_SIZE, wall_time, size))
        return taken

    def step(self) -> None:
        """Mark a step boundary by hand (loops without an optimizer, e.g. inference)."""
        self.timer.manual_step()

    def log(self, scalars: dict[str, Any]) -> None:
        """Record the script's scalars now (`perfweb_agent.log`); bad ones are dropped with a
        warning."""
        self.signals.log(scalars)

    def phase(self, phase: str) -> None:
        """The script enters a phase of protocol.PHASES now (`perfweb_agent.phase`)."""
        self.signals.phase(phase)

    def name_from_framework(self, name: str, *, source: str) -> bool:
        """Name the run after a framework's run name, unless the agent was given a name
        (`--name`, PERF_AGENT_NAME, `attach(name=...)`); True when the run takes it."""
        if self.settings.name:
            return False
        return self.signals.name_run(name, source=source)

    def after_fork_in_child(self) -> None:
        """A forked child (DataLoader worker) must not send nor touch the parent's locks."""
        self._lock = threading.Lock()
        self._closed = True
        self.timer.reset_after_fork()
        self.signals.reset_after_fork()
        self.sender.reset_after_fork()
        if self.profiler is not None:
            self.profiler.reset_after_fork()

    # ------------------------------------------------------------------ bodies
    def start_body(self) -> dict[str, Any]:
        """The `start` request: who we are, where, and what runs."""
        return {
            "run_id": self.settings.run_id,
            "agent_id": self.agent_id,
            "name": self.settings.name or _default_name(self.command),
            "role": self.role,
            "command": self.command,
            "cwd": os.getcwd(),
            "host": socket.gethostname(),
            "pid": self.pid,
            "rank": self.rank,
            "local_rank": _env_int("LOCAL_RANK"),
            "world_size": _env_int("WORLD_SIZE"),
            "started_at": time.time(),
            "tags": dict(self.settings.tags),
            "facts": {"agent.role": self.role, "python.version": sys.version.split()[0]},
            "devices": [],
        }

    def finish_body(self) -> dict[str, Any]:
        """The `finish` request; final unless a `perf-agent attach` launcher ends the run."""
        final = self.role == protocol.ROLE_LAUNCHER or not self.settings.launched
        return {
            "run_id": self.settings.run_id,
            "agent_id": self.agent_id,
            "ended_at": time.time(),
            "exit_code": self.exit_code if self.exit_code is not None else 0,
            "final": final,
            "produced": {
                "samples": self.sender.samples.accepted,
                "steps": self.sender.steps.accepted,
                "dropped": self.sender.dropped,
                "rejected": self.sender.rejected,  # requests the server refused for good
                "sanitized": self.sender.sanitizer.count,  # values cleaned before sending
            },
        }

    # ------------------------------------------------------------------ agent thread
    def _tick(self) -> None:
        if not self.collecting:
            return
        first = self._ticks == 0
        self._ticks += 1
        if first:
            self._first_tick()
            if not self.collecting:
                return
        samples = self.process.collect() + self._take_batch_sizes()
        if self.samples_gpus:  # one process per host: the GPUs' and the host's numbers
            samples += self.nvml.collect()
            samples += self.host.collect()
        torch = torch_state.imported_torch() if self.patches.installed else None
        if torch is not None:
            samples += torch_state.cuda_memory(torch, time.time(), self.naming)
            if first or self._closed or self._ticks % FACTS_EVERY_TICKS == 0:
                self.sender.facts.update(
                    torch_state.dynamic_facts(torch, self.counters, self.timer.index)
                )
                self.sender.facts.update(torch_state.step_facts(self.timer))
        self.sender.samples.extend(samples)

    def _ship_traces(self) -> None:
        """On the network thread: uploading a trace to a slow server never delays a sample."""
        if self.profiler is not None:
            self.profiler.poll()

    def _first_tick(self) -> None:
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        if getattr(spec, "name", None) in TORCHRUN_MAINS:
            self.abandon()  # the torchrun launcher itself: its ranks report
            return
        if self.samples_gpus:
            self.sender.facts.set("host.cpu_count", os.cpu_count())
            self.sender.facts.update(self.nvml.facts())
            self.sender.devices = self.nvml.devices()

    def abandon(self) -> None:
        """Stop without sending anything more (this process is not one to report on)."""
        self.collecting = False
        self._cancel_hook()
        self.sender.abandon()

    def _torch_imported(self, torch: Any) -> None:
        if os.getpid() != self.pid or self._closed:
            return
        self.patches.install(torch)
        self.sender.facts.update(torch_state.static_facts(torch))
        if self.settings.profile:
            try:
                from perfweb_agent.runtime.profiler import ProfilerWindows

                self.profiler = ProfilerWindows(self)
            except ImportError:
                pass
            except Exception as exc:  # noqa: BLE001
                say_once("profiler", "profiler windows off: %s", exc)

    def _on_command(self, command: dict[str, Any]) -> None:
        if command.get("type") == "capture_trace" and self.profiler is not None:
            self.profiler.request(int(command.get("steps") or 0) or None)
        else:
            log.debug("ignoring command %r", command.get("type"))

    def _job_pids(self) -> Iterable[int]:
        """This process, its children, and under torchrun its sibling ranks (and theirs)."""
        pids = self.process.pids()
        if os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("LOCAL_RANK"):
            for sibling in child_pids(os.getppid()) or []:
                pids.add(sibling)
                pids.update(child_pids(sibling) or [])
        return pids


def _default_name(command: list[str]) -> str:
    for part in command[1:]:
        if part.endswith(".py"):
            return os.path.basename(part)[:-3]
    return os.path.basename(command[0]) if command else "run"
