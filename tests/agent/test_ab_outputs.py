"""Output agreement of an A/B round: the model's outputs captured in each arm and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfweb_agent.ab import outputs as aboutputs
from perfweb_agent.ab import seed as abseed
from perfweb_agent.ab.outputs import read_capture, read_outputs, summary
from perfweb_contract.ab.results import output_agreement


def changes_results(measured: dict, *, top1_min: float = 0.99, relative_max: float = 1e-2) -> bool:
    """The A/B's own judgement of one round (perfweb_contract.ab.results.output_agreement)."""
    judged = output_agreement([measured], top1_min=top1_min, rel_max=relative_max)
    return judged.within_tolerance is not True


REPO = Path(__file__).resolve().parents[2]
SERVE = (
    "import runpy, sys\n"
    "from perfweb_agent.ab import knobs\n"
    "knobs.apply_from_env()\n"
    "sys.argv = ['serving_linear_fp32.py', '--requests', '80']\n"
    "sys.path.insert(0, 'examples')\n"
    "runpy.run_path('examples/serving_linear_fp32.py', run_name='__main__')\n"
)


def _serve(tmp_path: Path, arm: str, knob_text: str) -> list[dict]:
    path = tmp_path / f"{arm}.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PERF_AGENT_KNOBS": knob_text,
        aboutputs.ENV_OUTPUTS_FILE: str(path),
    }
    done = subprocess.run(
        [sys.executable, "-c", SERVE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "served 1280 rows"  # the script ran every request
    return read_outputs(str(path))


def test_it_captures_a_bounded_sample_of_the_models_outputs(tmp_path: Path) -> None:
    outputs = _serve(tmp_path, "baseline", "")
    assert len(outputs) == aboutputs.MAX_REQUESTS  # 80 requests served, 64 kept
    assert outputs[0]["shape"] == [16, 10] and len(outputs[0]["top1"]) == 16
    assert len(outputs[0]["values"]) == 160


def test_the_same_inputs_give_identical_outputs_in_two_fp32_arms(tmp_path: Path) -> None:
    measured = summary(_serve(tmp_path, "a", ""), _serve(tmp_path, "b", ""))
    assert measured["samples"] == 64 and measured["top1_agreement"] == 1.0
    assert measured["max_abs_diff"] == 0.0 and not changes_results(measured)


def test_int8_quantization_changes_results_beyond_the_default_tolerance(tmp_path: Path) -> None:
    baseline = _serve(tmp_path, "baseline", "")
    quantized = _serve(tmp_path, "candidate", "quantize=dynamic")
    measured = summary(baseline, quantized)
    assert measured["samples"] == 64 and measured["mismatched"] == 0
    assert measured["max_abs_diff"] is not None and measured["max_abs_diff"] > 0
    assert changes_results(measured)  # refused at 99% top-1 / 1e-2 relative
    assert changes_results(measured, top1_min=0.0, relative_max=0.0)  # a zero tolerance too
    assert not changes_results(measured, top1_min=0.5, relative_max=0.5)  # loose: accepted


def test_agreement_counts_shape_changes_and_missing_outputs_as_changed_results() -> None:
    row = {"shape": [1, 2], "top1": [0], "values": [1.0, 0.0]}
    assert changes_results(summary([row], [{**row, "shape": [2, 1]}]))
    assert changes_results(summary([], []))
    same = summary([row], [row])
    assert same["top1_agreement"] == 1.0 and same["max_rel_diff"] == 0.0
    assert not changes_results(same)
    diverged = {**row, "values": [1.0, None]}  # the candidate's output is no longer finite
    assert summary([row], [diverged])["mismatched"] == 1 and changes_results(
        summary([row], [diverged]), top1_min=0.0, relative_max=1e9
    )


def test_the_relative_difference_is_to_each_requests_own_scale() -> None:
    small = {"shape": [2], "values": [0.01, 0.02]}
    large = {"shape": [2], "values": [100.0, 200.0]}
    moved = summary([small, large], [{**small, "values": [0.01, 0.03]}, large])
    assert moved["max_abs_diff"] == pytest.approx(0.01)
    assert moved["max_rel_diff"] == pytest.approx(0.5)  # 0.01 of a 0.02 output, not of 200
    assert moved["top1_agreement"] is None and moved["samples"] == 2
    assert summary([], [], note="why")["note"] == "why"


def test_it_reads_nothing_from_a_missing_or_broken_file(tmp_path: Path) -> None:
    assert read_outputs(str(tmp_path / "none.json")) == []
    assert read_capture(str(tmp_path / "none.json"))[1] == aboutputs.NOT_WRITTEN
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"values": 1}))
    assert read_outputs(str(broken)) == []


def test_it_says_why_when_the_model_returned_no_tensor(tmp_path: Path) -> None:
    script = (
        "import torch\n"
        "from perfweb_agent.ab import knobs\n"
        "knobs.apply_from_env()\n"
        "class Words(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.scale = torch.nn.Parameter(torch.ones(1))\n"
        "    def forward(self, x):\n"
        "        return 'label'\n"
        "model = Words().eval()\n"
        "for _ in range(3):\n"
        "    model(torch.ones(2))\n"
    )
    path = tmp_path / "words.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), aboutputs.ENV_OUTPUTS_FILE: str(path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert read_capture(str(path)) == ([], "outputs not captured: the model returned no tensor")


def test_the_kept_outputs_are_bounded_in_numbers_not_only_requests(tmp_path: Path) -> None:
    script = (
        "import torch\n"
        "from perfweb_agent.ab import knobs\n"
        "knobs.apply_from_env()\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 4000)).eval()\n"
        "with torch.no_grad():\n"
        "    for _ in range(40):\n"
        "        model(torch.ones(2, 4))\n"  # 8,000 numbers per request
    )
    path = tmp_path / "wide.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), aboutputs.ENV_OUTPUTS_FILE: str(path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    outputs = read_outputs(str(path))
    assert sum(len(entry["values"]) for entry in outputs) == aboutputs.MAX_TOTAL_VALUES
    assert len(outputs) == aboutputs.MAX_TOTAL_VALUES // aboutputs.MAX_VALUES  # 16 requests
    assert path.stat().st_size < 2_000_000


def test_the_ab_seed_gives_an_unseeded_script_the_same_inputs_in_both_arms(
    tmp_path: Path,
) -> None:
    script = (
        "import random\n"
        "from perfweb_agent.ab import knobs\n"
        "knobs.apply_from_env()\n"
        "import torch\n"
        "print(float(torch.randn(1)), random.random())\n"
    )

    def draw(seed: str | None) -> str:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop(abseed.ENV_SEED, None)
        if seed is not None:
            env[abseed.ENV_SEED] = seed
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert draw("7") == draw("7")
    assert draw(None) != draw(None)  # what the seed prevents: each run draws its own inputs
