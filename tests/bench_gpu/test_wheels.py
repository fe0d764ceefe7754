"""The recommender's wheels: installed offline only where missing, and a clear reason when
they cannot be."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from bench.gpu import wheels

FAKE = "perfweb_gpu_kit_fake_dep"


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel of the module FAKE."""
    path = folder / f"{FAKE}-1.0-py3-none-any.whl"
    info = f"{FAKE}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{FAKE}.py", "ANSWER = 42\n")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {FAKE}\nVersion: 1.0\n")
        whl.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"{info}/RECORD", "")
    return path


def test_it_installs_nothing_when_the_recommender_s_modules_are_present(tmp_path: Path) -> None:
    status = wheels.prepare(folder=tmp_path / "none", target=tmp_path / "site")
    assert status == {
        "missing": [],
        "installed": [],
        "site": None,
        "ok": True,
        "reason": "all present",
    }


def test_it_names_the_missing_module_it_has_no_wheel_for(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(wheels, "REQUIRED", ("orjson", FAKE))
    status = wheels.prepare(folder=tmp_path, target=tmp_path / "site")
    assert status["ok"] is False and status["missing"] == [FAKE]
    assert (
        f"no wheel for {FAKE}" in status["reason"] and "bench.gpu.wheels fetch" in status["reason"]
    )


def test_it_installs_a_missing_module_offline_into_its_own_folder(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(wheels, "REQUIRED", ("orjson", FAKE))
    _wheel(tmp_path)
    status = wheels.prepare(folder=tmp_path, target=tmp_path / "site")
    assert status["ok"] is True, status
    assert status["installed"] == [f"{FAKE}-1.0-py3-none-any.whl"]
    env = wheels.recommender_env(status["site"], Path.cwd())
    imported = subprocess.run(
        [sys.executable, "-c", f"import {FAKE}; print({FAKE}.ANSWER)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() == "42"
    assert FAKE not in os.environ.get("PYTHONPATH", "")  # only the recommender's process sees it
