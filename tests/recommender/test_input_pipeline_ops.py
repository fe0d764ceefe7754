"""A torchvision-style input pipeline in the training process is not the model's dispatch.

mnist and vae of pytorch/examples read MNIST through `ToTensor()` + `Normalize()` in a
`num_workers=0` DataLoader: per sample a dozen tiny operators inside `__next__`, most of a
small model's CPU operators per step. `launch.overhead` counted them as the model's and put
`torch.compile(model)`, which cannot fuse them, first (1280 "tiny operators per step" for
mnist's 4-layer CNN, 808 of them the loader's); their wait is `dataloader.*`'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfweb_recommender.analysis.host_device import cpu_op_stats
from perfweb_recommender.api import analyze_path
from perfweb_recommender.trace.loader import load_trace
from tests.recommender.offline_runs import attach_with_a_window

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _x(cat: str, name: str, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {}}


def test_operators_inside_a_dataloader_fetch_are_not_counted_as_the_steps(
    tmp_path: Path,
) -> None:
    events = []
    for step in range(2):  # each step: a fetch of 40 tiny ops, then 10 model ops
        base = 1000.0 + step * 1000
        events.append(_x("user_annotation", f"ProfilerStep#{step}", base, 1000))
        events.append(_x("user_annotation", NEXT, base, 400))
        events += [_x("cpu_op", "aten::div", base + 5 + 9 * i, 2) for i in range(40)]
        events += [_x("cpu_op", "aten::addmm", base + 500 + 40 * i, 30) for i in range(10)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    stats = cpu_op_stats(load_trace(path))
    assert stats == {"ops_per_step": 10.0, "median_op_us": 30.0, "parallel_share": 0.3}


PIPELINE = """
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN, STD = torch.tensor([0.5, 0.5, 0.5]), torch.tensor([0.25, 0.25, 0.25])

class Images(Dataset):  # what torchvision's ToTensor() + Normalize() do to each sample
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.raw = torch.randint(0, 256, (32 * 30, 4, 4, 3), dtype=torch.uint8, generator=g)
    def __len__(self):
        return len(self.raw)
    def __getitem__(self, i):
        x = self.raw[i].permute(2, 0, 1).contiguous().to(torch.float32).div(255)
        if (STD == 0).any():
            raise ValueError("std 0")
        x = x.sub(MEAN.view(-1, 1, 1)).div(STD.view(-1, 1, 1))
        return x.clone(), int(i % 4)

torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(48, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Images(), batch_size=32):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
print("done")
"""


@pytest.mark.slow
def test_a_per_sample_transform_pipeline_is_the_dataloaders_finding_not_launch_overhead(
    tmp_path: Path,
) -> None:
    script, offline = tmp_path / "pipeline.py", tmp_path / "offline"
    script.write_text(PIPELINE)
    result = attach_with_a_window(script, offline)
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr[-2000:]
    report = analyze_path(offline)
    assert report.run["steps"] == 30 and len(report.traces) == 1
    # the model's operators: a Linear, a loss, its backward and SGD's update, far under 300
    assert report.traces[0].cpu_ops["ops_per_step"] < 150, report.traces[0].cpu_ops
    ids = [f.id for f in report.findings]
    assert "launch.overhead" not in ids, ids
