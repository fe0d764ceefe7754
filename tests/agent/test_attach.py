"""`perf-agent attach` runs a script untouched, with the agent inside it."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.conftest import ROOT, attach, online, write_script
from tests.agent.fakeserver import FakeServer


def _roles(server: FakeServer) -> dict[str, str]:
    return {agent: body["role"] for agent, body in server.store.starts.items()}


def test_it_exits_with_the_commands_exit_code_and_says_so_in_finish(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, "import sys\nprint('hello', flush=True)\nsys.exit(3)\n")
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    assert result.returncode == 3
    assert result.stdout == "hello\n"
    launcher = [a for a, role in _roles(server).items() if role == "launcher"]
    assert len(launcher) == 1
    finish = server.store.finishes[launcher[0]]
    assert finish["exit_code"] == 3 and finish["final"] is True
    workers = [a for a, role in _roles(server).items() if role == "worker"]
    assert len(workers) == 1 and server.store.finishes[workers[0]]["final"] is False
    runs = {body["run_id"] for body in server.store.starts.values()}
    assert len(runs) == 1


def test_it_leaves_stdout_and_stderr_untouched(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(
        tmp_path,
        "import sys\nfor i in range(3):\n    print(i)\nsys.stderr.write('warn\\n')\n",
    )
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    theirs = [line for line in result.stderr.splitlines() if not line.startswith("[perf-agent]")]
    assert (result.returncode, result.stdout, theirs) == (0, "0\n1\n2\n", ["warn"])


def test_it_chains_to_an_existing_sitecustomize(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['THEIRS'] = 'ran'\n")
    script = write_script(tmp_path, "import os\nprint(os.environ.get('THEIRS'))\n")
    env = {**agent_env, "PYTHONPATH": f"{agent_env['PYTHONPATH']}:{site}"}
    result = attach([*online(server), "--", sys.executable, str(script)], env)
    assert result.stdout == "ran\n"


def test_it_forwards_sigterm_to_the_command(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    ready = tmp_path / "ready"
    script = write_script(
        tmp_path,
        f"""
        import pathlib, signal, sys, time
        def bye(signum, frame):
            print("got", signum, flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, bye)
        pathlib.Path({str(ready)!r}).write_text("1")
        time.sleep(30)
        """,
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "attach",
            *online(server),
            "--",
            sys.executable,
            str(script),
        ],
        env=agent_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 7
    assert out == f"got {int(signal.SIGTERM)}\n"


def test_it_reports_a_command_killed_by_a_signal_as_128_plus_n(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    assert result.returncode == 128 + int(signal.SIGKILL)
    finals = [f for f in server.store.finishes.values() if f["final"]]
    assert finals[0]["exit_code"] == 128 + int(signal.SIGKILL)


def test_it_refuses_to_attach_without_a_destination(agent_env: dict[str, str]) -> None:
    result = attach(["--", sys.executable, "-c", "pass"], agent_env)
    assert result.returncode == 2
    assert "--server" in result.stderr


def test_it_logs_one_line_without_nvml_and_keeps_process_metrics(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, "import time\ntime.sleep(0.8)\n")
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    nvml_lines = [line for line in result.stderr.splitlines() if "NVML" in line]
    assert len(nvml_lines) == 1, result.stderr
    assert server.store.metric("process", "process.rss")
    assert server.store.facts()["nvml.available"] is False


def test_without_psutil_and_pynvml_it_runs_on_the_standard_library(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for name in ("psutil", "pynvml"):
        (hidden / f"{name}.py").write_text(f"raise ImportError('{name} hidden by the test')\n")
    script = write_script(tmp_path, "import time\ntime.sleep(0.8)\nprint('fine')\n")
    env = {**agent_env, "PYTHONPATH": f"{hidden}:{agent_env['PYTHONPATH']}"}
    result = attach([*online(server), "--", sys.executable, str(script)], env)
    assert (result.returncode, result.stdout) == (0, "fine\n")
    assert "pynvml hidden" in result.stderr  # the one NVML line says why
    assert server.store.metric("process", "process.rss")


def test_ctrl_c_in_a_terminal_reaches_the_command_once(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    import os
    import pty

    ready = tmp_path / "ready"
    script = write_script(
        tmp_path,
        f"""
        import pathlib, signal, sys, time
        count = 0
        def on_int(signum, frame):
            global count
            count += 1
        signal.signal(signal.SIGINT, on_int)
        pathlib.Path({str(ready)!r}).write_text("1")
        end = time.monotonic() + 20
        while not count and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.5)  # a doubled SIGINT would arrive meanwhile
        sys.exit(10 + count)
        """,
    )
    argv = [
        sys.executable,
        "-m",
        "perfweb_agent.cli.main",
        "attach",
        *online(server),
        "--",
        sys.executable,
        str(script),
    ]
    pid, master = pty.fork()
    if pid == 0:  # the child: a session on the pseudo-terminal, like a shell's job
        os.chdir(ROOT)
        os.execve(sys.executable, argv, agent_env)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.write(master, b"\x03")  # Ctrl-C: the terminal signals the whole foreground group
    while True:  # drain the terminal so the child never blocks on output
        try:
            if not os.read(master, 1024):
                break
        except OSError:
            break
    _, status = os.waitpid(pid, 0)
    os.close(master)
    assert os.waitstatus_to_exitcode(status) == 11  # exactly one SIGINT reached the script


def test_a_launcher_whose_agent_cannot_start_still_runs_the_command_and_keeps_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from perfweb_agent.cli.attach import run_attached
    from perfweb_agent.core.config import load_settings
    from perfweb_agent.core.logger import log
    from perfweb_agent.runtime.agent import Agent

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    monkeypatch.setattr(log, "handlers", [handler])

    def broken_start(self: Agent) -> None:
        raise RuntimeError("no room for the agent")

    monkeypatch.setattr(Agent, "start", broken_start)
    script = write_script(tmp_path, "import sys\nprint('ran', flush=True)\nsys.exit(5)\n")
    settings = load_settings({}, offline=str(tmp_path / "out"), profile=False)
    command = [sys.executable, "-S", str(script)]  # -S: no agent inside it either
    assert run_attached(settings, command) == 5
    assert capfd.readouterr().out == "ran\n"
    assert any("launcher's agent could not start (no room for the agent)" in m for m in said)
