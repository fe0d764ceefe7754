"""The agent inside one process: wires settings, collectors, torch hooks, batches and the
sender."""

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
from perfweb_agent.core import importhook
from perfweb_agent.core.buffer import Sample
from perfweb_agent.core.config import Settings
from perfweb_agent.core.logger import log, say_once
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.batches import Batches
from perfweb_agent.delivery.sender import PostFn, Sender
from perfweb_agent.delivery.traces import TraceShipper
from perfweb_agent.runtime import forked, script_error, torch_state
from perfweb_agent.runtime.flops import PeakCache, StepFlops, host_peak
from perfweb_agent.runtime.scalars import ScriptSignals
from perfweb_agent.runtime.steps import StepTimer
from perfweb_agent.runtime.torch_patches import TorchPatches
from perfweb_agent.runtime.torch_state import Counters
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
        self.forked_rank = False  # a rank forked from the process that started the agent
        self._forked_world_size: int | None = None
        self._post = post
        self.batches = Batches(
            settings,
            self.agent_id,
            rank=self.rank,
            start_body=self.start_body,
            finish_body=self.finish_body,
            run_name=self._take_run_name,
        )
        self.facts = self.batches.facts  # the run's facts, for every part of the agent
        self.sender, self.traces = self._delivery(post)
        self._steps_device = protocol.rank_device(self.rank)
        # (end time, batch size) of each step: a deque append in the training thread, moved
        # into the sample buffer on the agent's tick
        self._batch_sizes: deque[tuple[float, float]] = deque(maxlen=BATCH_SIZES_HELD)
        self.timer = StepTimer(self.batches.steps, batch_sink=self._batch_sizes.append)
        self.signals = ScriptSignals(self.batches.samples, self.facts, device=self._steps_device)
        self.counters = Counters()
        self.patches = TorchPatches(self.timer, self.facts, self.counters)
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
        self.flops: StepFlops | None = None
        self._ticks = 0
        self._closed = False
        self._started_s = time.monotonic()  # from start(): a run this long probes the CPU
        self._cancel_hook: Callable[[], None] = lambda: None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Queue `start`, hook torch once the script imports it, start the thread."""
        self._started_s = time.monotonic()
        if self.collecting:
            self._cancel_hook = importhook.when_imported("torch", self._torch_imported)
            script_error.install(self.facts.set)  # the run's last error line, if any
        self.nvml.load()  # here, not on the sampler's thread (NvmlCollector.load says why)
        self.sender.start()
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
        self._close_flops()
        self.timer.finish()
        self.sender.close(deadline_s)

    def _close_flops(self) -> None:
        """The FLOPs count ends; on a CPU run whose step was counted, the host's peak is
        probed now, after the script's last step, or taken from this host's cache
        (agent/perfweb_agent/runtime/flops.py)."""
        flops = self.flops
        if flops is None:
            return
        counted = flops.done and "flops.per_step" in self.facts.snapshot()
        flops.close()
        torch = torch_state.imported_torch()
        if not counted or torch is None or torch_state.cuda_initialized(torch):
            return
        try:
            cache = PeakCache(self.settings.effective_cache_dir())
            peak = host_peak(torch, cache, run_s=time.monotonic() - self._started_s)
            self.facts.update(peak)
        except Exception as exc:  # noqa: BLE001
            say_once("cpu-peak", "cannot measure the CPU's peak: %s", exc)

    def _take_batch_sizes(self) -> list[Sample]:
        """The steps' batch sizes since the last tick, as samples on the steps' device."""
        sizes, taken = self._batch_sizes, []
        while sizes:
            wall_time, size = sizes.popleft()
            taken.append((self._steps_device, protocol.STEP_BATCH_SIZE, wall_time, size))
        return taken

    def _take_phases(self) -> list[Sample]:
        """The step anatomy of the steps emitted since the last tick
        (agent/perfweb_agent/runtime/anatomy.py); at close, a bounded wait for the last CUDA
        events."""
        device = self._steps_device
        return [
            (device, name, wall_time, seconds)
            for wall_time, name, seconds in self.timer.anatomy.read(final=self._closed)
        ]

    def _take_served(self) -> list[Sample]:
        """At close: the model's calls after the last training step (runtime/served.py)."""
        if not self.timer.training_seen:
            return []
        return self.timer.after_training.take(self.facts, self._steps_device)

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
        """A forked child (DataLoader worker) must not send nor touch the parent's locks;
        one that trains reports as a rank of its own (agent/perfweb_agent/runtime/forked.py)."""
        running = self.collecting and not self._closed
        self._lock = threading.Lock()
        self._closed = True
        self.timer.reset_after_fork()
        self.signals.reset_after_fork()
        self.batches.reset_after_fork()
        self.sender.reset_after_fork()
        if self.profiler is not None:
            self.profiler.reset_after_fork()
        if running:
            self.timer.wake_on_training = self._report_as_forked_rank

    def _report_as_forked_rank(self) -> bool:
        """The forked child's first training step: a new identity and a sender of its own,
        over the buffers the installed hooks fill; no profiler, no FLOPs count here."""
        if forked.in_dataloader_worker():
            return False
        rank, world_size = forked.identity()
        self.agent_id, self.pid, self.rank = uuid.uuid4().hex, os.getpid(), rank
        self.forked_rank, self._forked_world_size = True, world_size
        self.batches.become(self.agent_id, rank=rank)  # the buffers the hooks fill stay
        self.sender, self.traces = self._delivery(self._post)
        self._steps_device = protocol.rank_device(rank)
        if rank is not None:
            self.naming = protocol.DeviceNaming(rank=rank)
        self.process = ProcessCollector(naming=self.naming)  # this pid's numbers
        self.samples_gpus = False  # the parent samples the host and its GPUs
        for listener in (self.flops, getattr(self.profiler, "on_step", None)):
            if listener in self.timer.listeners:
                self.timer.listeners.remove(listener)
        self.profiler = self.flops = None
        self._ticks, self._closed = 0, False
        self.sender.start()
        forked.flush_at_os_exit(self.close)
        return True

    def _delivery(self, post: PostFn) -> tuple[Sender, TraceShipper]:
        """A sender of the batches and a shipper of the traces, for this agent's id."""
        sender = Sender(
            self.settings,
            self.agent_id,
            next_batch=self.batches.cut,
            post=post,
            tick=self._tick,
            on_command=self._on_command,
            network_work=self._ship_traces,
        )
        traces = TraceShipper(
            self.settings,
            self.agent_id,
            post=post,
            offline_folder=sender.offline_folder,
            keep_folder=sender.outbox.claimed_folder,
        )
        return sender, traces

    # ------------------------------------------------------------------ bodies
    def start_body(self) -> dict[str, Any]:
        """The `start` request: who we are, where, and what runs."""
        body: dict[str, Any] = {
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
        if self.forked_rank:
            body["facts"]["agent.forked"] = True
            if self._forked_world_size is not None:
                body["world_size"] = self._forked_world_size
        return body

    def finish_body(self) -> dict[str, Any]:
        """The `finish` request; final unless a `perf-agent attach` launcher ends the run.
        Batches adds what was produced (`produced`) when it cuts it."""
        final = self.role == protocol.ROLE_LAUNCHER or not self.settings.launched
        final = final and not self.forked_rank  # the process that forked it ends the run
        return {
            "run_id": self.settings.run_id,
            "agent_id": self.agent_id,
            "ended_at": time.time(),
            "exit_code": self.exit_code if self.exit_code is not None else 0,
            "final": final,
        }

    @property
    def dropped(self) -> int:
        """Samples and steps dropped since start: by the full buffers, then by the outbox."""
        return self.batches.dropped + self.sender.dropped

    def _take_run_name(self) -> str | None:
        return self.signals.take_run_name()

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
        samples = self.process.collect() + self._take_batch_sizes() + self._take_phases()
        if self._closed:  # the calls that followed the last optimizer step: served requests
            samples += self._take_served()
        if self.samples_gpus:  # one process per host: the GPUs' and the host's numbers
            samples += self.nvml.collect()
            samples += self.host.collect()
        torch = torch_state.imported_torch() if self.patches.installed else None
        if torch is not None:
            samples += torch_state.cuda_memory(torch, time.time(), self.naming)
            if first or self._closed or self._ticks % FACTS_EVERY_TICKS == 0:
                self.facts.update(torch_state.dynamic_facts(torch, self.counters, self.timer.index))
                self.facts.update(self.timer.facts())
                self.facts.update(self.patches.loader_stats.facts())
        self.batches.samples.extend(samples)

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
            self.facts.set("host.cpu_count", os.cpu_count())
            self.facts.update(self.nvml.facts())
            self.batches.describe_devices(self.nvml.devices())

    def abandon(self) -> None:
        """Stop without sending anything more (this process is not one to report on)."""
        self.collecting = False
        self._cancel_hook()
        self.sender.abandon()

    def _torch_imported(self, torch: Any) -> None:
        if os.getpid() != self.pid or self._closed:
            return
        self.patches.install(torch)
        self.facts.update(torch_state.static_facts(torch))
        if self.flops is None and self.settings.flops:
            self.flops = StepFlops(torch, self.facts, on_done=self._flops_counted, timer=self.timer)
            self.timer.listeners.append(self.flops)
        if self.settings.profile:
            try:
                from perfweb_agent.runtime.profiler import ProfilerWindows

                self.profiler = ProfilerWindows(self, ship=self.traces.deliver)
            except ImportError:
                pass
            except Exception as exc:  # noqa: BLE001
                say_once("profiler", "profiler windows off: %s", exc)

    def _flops_counted(self) -> None:
        if self.flops in self.timer.listeners:
            self.timer.listeners.remove(self.flops)

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
