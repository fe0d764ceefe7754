"""The facts the inference rules read, from real serving scripts under `perf-agent attach`."""

from __future__ import annotations

import sys
from pathlib import Path

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules import diagnose
from tests.agent.conftest import attach, online, write_script
from tests.agent.fakeserver import FakeServer

SERVING = """
import sys, time, torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
guard = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode}
start = time.monotonic()
served = 0
while served < 60 or time.monotonic() - start < 7:  # outlive a fact-sampling interval
    with guard[sys.argv[1]]():
        model(torch.randn(8, 64)).argmax(-1)
    served += 1
print("served")
"""


def _facts(tmp_path: Path, server: FakeServer, env: dict[str, str], guard: str) -> dict:
    path = write_script(tmp_path, SERVING)
    done = attach([*online(server), "--", sys.executable, str(path), guard], env, timeout=180)
    assert done.returncode == 0, done.stderr
    return server.store.facts()  # type: ignore[no-any-return]


def test_serving_with_autograd_on_is_seen_and_diagnosed(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    facts = _facts(tmp_path, server, agent_env, "grad")
    assert facts["workload.kind"] == "inference" and facts["inference.grad_enabled"] is True
    assert facts["model.class"] == "Sequential" and facts["model.dtype"] == "float32"
    assert facts["model.linear_param_share"] == 1.0 and facts["model.quantized"] is False
    found = {f.id: f for f in diagnose(RunEvidence(facts=facts))}
    assert found["inference.autograd_enabled"].fix.knob == "inference_mode=true"
    assert found["model.quantization"].fix.knob == "quantize=dynamic"


def test_serving_under_no_grad_or_inference_mode_is_not_told_to_turn_autograd_off(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    for guard in ("no_grad", "inference"):
        facts = _facts(tmp_path, server, agent_env, guard)
        assert facts["inference.grad_enabled"] is False
        found = {f.id for f in diagnose(RunEvidence(facts=facts))}
        assert "inference.autograd_enabled" not in found
