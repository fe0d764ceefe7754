"""A DataLoader knob is addressed to the loader the training loop waits on: an A/B job's
`num_workers` changes that loader alone (agent/perfweb_agent/ab/knobs_torch.py,
perfweb_contract.loaders), never an evaluation loader beside it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from perfweb_agent.ab.engine import BASELINE, CANDIDATE, AbPlan, arm_env, run_ab
from perfweb_contract.loaders import (
    ENV_KNOB_LOADER,
    training_loader_from_facts,
    training_loader_index,
)
from tests.agent.conftest import ROOT, write_script

# An evaluation loader iterated first (an eval at iteration 0, so it is loader 0), then the
# training loader (loader 1); each arm appends what its two loaders ran with.
TWO_LOADERS = """
import json, os, sys, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    held = DataLoader(TensorDataset(torch.randn(8, 8)), batch_size=4)
    train = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=4)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def evaluate():
        with torch.no_grad():
            for (x,) in held:
                model(x)

    try:
        evaluate()
        for step, (x, y) in enumerate(train):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if step % 4 == 3:
                evaluate()
    finally:
        with open(sys.argv[1], "a") as out:
            out.write(json.dumps({"knobs": os.environ.get("PERF_AGENT_KNOBS", ""),
                                  "train": train.num_workers, "held": held.num_workers}) + "\\n")
"""


def test_the_training_loader_is_the_one_that_fed_the_most_optimizer_steps() -> None:
    assert training_loader_index([3, 40]) == 1 and training_loader_index([0, 0]) == 0
    assert training_loader_index([]) is None
    facts = {"dataloader.0.fed_steps": 3, "dataloader.1.fed_steps": 45, "dataloader.count": 2}
    assert training_loader_from_facts(facts) == 1
    assert training_loader_from_facts({"dataloader.0.num_workers": 0}) is None


def test_an_ab_jobs_num_workers_changes_only_the_loader_the_training_loop_waits_on(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path, TWO_LOADERS)
    seen = tmp_path / "loaders.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PERF_AGENT_INTERVAL="0.2")
    plan = AbPlan(
        command=[sys.executable, str(script), str(seen)],
        knobs={"num_workers": 1},
        rounds=2,
        steps=3,
        warmup=0,
        env=env,
    )
    run_ab(plan)
    arms = [json.loads(line) for line in seen.read_text().splitlines()]
    baseline = [a for a in arms if not a["knobs"]]
    candidate = [a for a in arms if a["knobs"] == "num_workers=1"]
    assert len(baseline) == len(candidate) == 2, arms
    assert all((a["train"], a["held"]) == (0, 0) for a in baseline)
    assert all((a["train"], a["held"]) == (1, 0) for a in candidate)  # the eval loader kept 0


def test_the_candidate_alone_is_told_which_loader_and_only_for_dataloader_knobs() -> None:
    plan = AbPlan(command=["python", "x.py"], knobs={"num_workers": 4})
    assert arm_env(plan, arm=CANDIDATE, loss_file="l", loader=1)[ENV_KNOB_LOADER] == "1"
    assert ENV_KNOB_LOADER not in arm_env(plan, arm=BASELINE, loss_file="l", loader=1)
    assert ENV_KNOB_LOADER not in arm_env(plan, arm=CANDIDATE, loss_file="l")  # not known
    threads = AbPlan(command=["python", "x.py"], knobs={"threads": 2})
    assert ENV_KNOB_LOADER not in arm_env(threads, arm=CANDIDATE, loss_file="l", loader=1)
