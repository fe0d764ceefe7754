"""`perf-agent upload DIR`: send an offline (or spill) directory to the server, idempotently.

Order: every agent's `start` (launchers first), then each agent's batches by seq, then the
non-final `finish` bodies, then the final ones, so the run ends after all its data. The
server drops `(run_id, agent_id, seq)` it already has, so uploading twice stores once.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from perfweb_agent.delivery import traces, transport
from perfweb_agent.delivery.transport import PATHS, PostFn
from perfweb_contract import layout, protocol


@dataclass
class UploadReport:
    """What an upload did."""

    sent: int = 0
    duplicates: int = 0
    failed: list[str] = field(default_factory=list)
    agents: int = 0
    traces: int = 0


def find_agent_dirs(root: str) -> list[str]:
    """Agent folders under `root` (a layout root, one run's folder, or one agent's folder)."""
    if os.path.exists(os.path.join(root, layout.START_FILE)) or layout.list_agent_files(root):
        return [root]
    found: list[str] = []
    for current, dirs, files in os.walk(root):
        dirs.sort()
        if layout.TRACES_DIR in dirs:
            dirs.remove(layout.TRACES_DIR)
        if {layout.START_FILE, layout.FINISH_FILE} & set(files) or any(
            layout.BATCH_RE.match(f) for f in files
        ):  # a launcher's spill may hold its finish alone (its start was delivered)
            found.append(current)
            dirs.clear()
    return found


def _role(folder: str) -> str:
    try:
        return str(layout.read_json(os.path.join(folder, layout.START_FILE)).get("role", ""))
    except (OSError, ValueError):
        return ""


def _is_final(path: str) -> bool:
    try:
        return bool(layout.read_json(path).get("final"))
    except (OSError, ValueError):
        return False


def plan(root: str) -> list[str]:
    """Every file to send, in order."""
    return plan_folders(find_agent_dirs(root))


def plan_folders(folders: list[str]) -> list[str]:
    """Every file of these agent folders to send, in order (launchers' starts first)."""
    folders = sorted(folders)
    folders.sort(key=lambda f: (_role(f) != protocol.ROLE_LAUNCHER, f))
    starts: list[str] = []
    batches: list[str] = []
    finishes: list[str] = []
    finals: list[str] = []
    for folder in folders:
        for path in layout.list_agent_files(folder):
            name = os.path.basename(path)
            if name == layout.START_FILE:
                starts.append(path)
            elif name == layout.FINISH_FILE:
                (finals if _is_final(path) else finishes).append(path)
            else:
                batches.append(path)
    return starts + batches + finishes + finals


def _send(
    server: str,
    token: str | None,
    path: str,
    post: PostFn,
    attempts: int,
    sleep: Callable[[float], None],
) -> transport.Reply:
    envelope = layout.read_envelope(path)
    reply = transport.Reply(0)
    for attempt in range(attempts):
        reply = post(server, PATHS[envelope.kind], token, envelope.gz, 30.0)
        if reply.ok or not reply.transient:
            return reply
        delay = reply.retry_after if reply.retry_after is not None else 0.5 * 2**attempt
        sleep(min(30.0, delay * random.uniform(0.8, 1.2)))
    return reply


def trace_files(folder: str) -> list[str]:
    traces_dir = os.path.join(folder, layout.TRACES_DIR)
    try:
        names = sorted(os.listdir(traces_dir))
    except OSError:
        return []
    return [os.path.join(traces_dir, n) for n in names if n.endswith(traces.TRACE_SUFFIX)]


def _upload_traces(
    root: str, server: str, token: str | None, post: PostFn, delete: bool, report: UploadReport
) -> None:
    for folder in find_agent_dirs(root):
        start = os.path.join(folder, layout.START_FILE)
        try:
            ids = layout.read_json(start)
        except (OSError, ValueError):
            continue
        for path in trace_files(folder):
            with open(path, "rb") as handle:
                data = handle.read()
            name = os.path.basename(path)[: -len(traces.TRACE_SUFFIX)]
            bodies = traces.chunk_bodies(ids["run_id"], ids["agent_id"], name, data)
            reply = traces.upload_trace(server, token, bodies, post)
            if not reply.ok:
                report.failed.append(f"{path}: {reply.status or 'unreachable'} {reply.error}")
                continue
            report.traces += 1
            if delete:
                os.unlink(path)


def upload(
    root: str,
    *,
    server: str,
    token: str | None,
    post: PostFn = transport.post,
    delete: bool = False,
    attempts: int = 6,
    sleep: Callable[[float], None] = time.sleep,
    with_traces: bool = True,
) -> UploadReport:
    """Send everything under `root`; with `delete`, remove each file once stored."""
    report = UploadReport(agents=len(find_agent_dirs(root)))
    for path in plan(root):
        reply = _send(server, token, path, post, attempts, sleep)
        if not reply.ok:
            report.failed.append(f"{path}: {reply.status or 'unreachable'} {reply.error}".strip())
            if reply.status in (401, 403) or reply.status == 0:
                break  # no point going on: wrong token or no server
            continue
        report.sent += 1
        report.duplicates += bool(reply.body.get("duplicate"))
        if delete:
            os.unlink(path)
    if with_traces and not report.failed:
        _upload_traces(root, server, token, post, delete, report)
    return report
