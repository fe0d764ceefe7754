"""The heaviest-kernels listing classifies real kernel names the way the recommender does."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from bench.gpu.kernels import top_kernels

REPO = Path(__file__).resolve().parents[2]
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_cublas"
FP32_GEMM = "ampere_sgemm_128x64_tn"
ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
)


def _trace(path: Path) -> Path:
    events = []
    for i, (name, dur) in enumerate(
        [(FP32_GEMM, 900), (BF16_GEMM, 300), (FP32_GEMM, 900), (ELEMENTWISE, 50)]
    ):
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": 1000 + i * 1000,
                "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": i + 1},
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_it_ranks_kernels_by_time_with_the_recommender_s_classes(tmp_path: Path) -> None:
    rows = top_kernels(_trace(tmp_path / "rank0-step3-8.pt.trace.json.gz"), top=2)
    assert [(r["name"], r["us"], r["count"]) for r in rows] == [
        (FP32_GEMM, 1800.0, 2),
        (BF16_GEMM, 300.0, 1),
    ]
    assert (rows[0]["dense_math"], rows[0]["tensor_core"], rows[0]["fp32_simt"]) == (
        True,
        False,
        True,
    )
    assert (rows[1]["dense_math"], rows[1]["tensor_core"]) == (True, True)


def test_it_lists_every_trace_of_an_offline_directory(tmp_path: Path) -> None:
    _trace(tmp_path / "run" / "agent" / "traces" / "rank0-step30-35.pt.trace.json.gz")
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu.kernels", str(tmp_path), "--top", "1"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    listed = json.loads(done.stdout)
    assert list(listed) == ["rank0-step30-35.pt.trace.json.gz"]
    assert listed["rank0-step30-35.pt.trace.json.gz"][0]["name"] == FP32_GEMM
