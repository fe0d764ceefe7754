"""Output agreement of an A/B round: the model's outputs captured in each arm and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agent import aboutputs
from agent.aboutputs import agreement, changes_results, read_outputs

REPO = Path(__file__).resolve().parents[2]
SERVE = (
    "import runpy, sys\n"
    "from agent import knobs\n"
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
        [sys.executable, "-c", SERVE], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "served 1280 rows"  # the script ran every request
    return read_outputs(str(path))


def test_it_captures_a_bounded_sample_of_the_models_outputs(tmp_path: Path) -> None:
    outputs = _serve(tmp_path, "baseline", "")
    assert len(outputs) == aboutputs.MAX_REQUESTS  # 80 requests served, 64 kept
    assert outputs[0]["shape"] == [16, 10] and len(outputs[0]["top1"]) == 16
    assert len(outputs[0]["values"]) == 160


def test_the_same_inputs_give_identical_outputs_in_two_fp32_arms(tmp_path: Path) -> None:
    measured = agreement(_serve(tmp_path, "a", ""), _serve(tmp_path, "b", ""))
    assert measured["requests"] == 64 and measured["top1_agreement"] == 1.0
    assert measured["max_abs_diff"] == 0.0 and not changes_results(measured)


def test_int8_quantization_changes_results_beyond_the_default_tolerance(tmp_path: Path) -> None:
    baseline = _serve(tmp_path, "baseline", "")
    quantized = _serve(tmp_path, "candidate", "quantize=dynamic")
    measured = agreement(baseline, quantized)
    assert measured["requests"] == 64 and measured["shape_mismatches"] == 0
    assert measured["max_abs_diff"] is not None and measured["max_abs_diff"] > 0
    assert changes_results(measured)  # refused at 99% top-1 / 1e-2 relative
    assert changes_results(measured, top1_min=0.0, relative_max=0.0)  # a zero tolerance too
    assert not changes_results(measured, top1_min=0.5, relative_max=0.5)  # loose: accepted


def test_agreement_counts_shape_changes_and_missing_outputs_as_changed_results() -> None:
    row = {"shape": [1, 2], "top1": [0], "values": [1.0, 0.0]}
    assert changes_results(agreement([row], [{**row, "shape": [2, 1]}]))
    assert changes_results(agreement([], []))
    same = agreement([row], [row])
    assert same["top1_agreement"] == 1.0 and same["relative_error"] == 0.0
    assert not changes_results(same)


def test_it_reads_nothing_from_a_missing_or_broken_file(tmp_path: Path) -> None:
    assert read_outputs(str(tmp_path / "none.json")) == []
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"values": 1}))
    assert read_outputs(str(broken)) == []
