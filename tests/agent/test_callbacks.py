"""The framework callbacks (agent/perfweb_agent/callbacks) on tiny models built from configs, under
`perf-agent attach`: the run takes the trainer's run name, the train/eval phases and the
logged loss and learning rate arrive as series, and the steps are the optimizer's, counted
once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfweb_contract import protocol
from tests.agent.conftest import ROOT, attach, online, write_script
from tests.agent.fakeserver import FakeServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TRAIN, EVAL, NONE = protocol.PHASES["train"], protocol.PHASES["eval"], protocol.PHASES["none"]

HF_TRAINER = """
import sys
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback
from perfweb_agent.callbacks import PerfwebCallback

class Tiny(Dataset):
    def __len__(self):
        return 24
    def __getitem__(self, i):
        ids = torch.randint(0, 100, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": torch.tensor(i % 2)}

config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16)
args = TrainingArguments(output_dir=sys.argv[1], run_name="bert-tiny-sst",
                         per_device_train_batch_size=4, per_device_eval_batch_size=4,
                         num_train_epochs=2, gradient_accumulation_steps=2, report_to=[],
                         save_strategy="no", logging_strategy="steps", logging_steps=2,
                         eval_strategy="steps", eval_steps=3, use_cpu=True, disable_tqdm=True)
trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tiny(),
                  eval_dataset=Tiny(), callbacks=[PerfwebCallback()])
trainer.remove_callback(PrinterCallback)
trainer.train()
print("global_step", trainer.state.global_step)
"""

LIGHTNING_TRAINER = """
import sys
import torch, lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from lightning.pytorch.loggers import CSVLogger
from perfweb_agent.callbacks import PerfwebLightningCallback

class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    def training_step(self, batch, _):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss
    def validation_step(self, batch, _):
        x, y = batch
        self.log("val/loss", nn.functional.mse_loss(self.net(x), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

torch.manual_seed(0)
data = TensorDataset(torch.randn(40, 8), torch.randn(40, 1))
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, log_every_n_steps=2,
                    logger=CSVLogger(sys.argv[1], name="regressor"), enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False,
                    callbacks=[PerfwebLightningCallback()])
trainer.fit(Regressor(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
print("global_step", trainer.global_step)
"""


def _attached(
    script: str, tmp_path: Path, server: FakeServer, env: dict[str, str], *flags: str
) -> str:
    path = write_script(tmp_path, script)
    env = {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = attach(
        [*online(server), *flags, "--", sys.executable, str(path), str(tmp_path / "out")],
        env,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _run_names(server: FakeServer) -> list[str]:
    return [b["run_name"] for _, b in sorted(server.store.batches.items()) if "run_name" in b]


def _phases(server: FakeServer) -> list[float]:
    return server.store.metric("rank:0", protocol.RUN_PHASE)


def test_the_hugging_face_callback_names_the_run_marks_phases_and_sends_loss_and_lr(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _attached(HF_TRAINER, tmp_path, server, agent_env) == "global_step 6\n"
    assert _run_names(server) == ["bert-tiny-sst"]
    # eval every 3 optimizer steps: train, eval after step 3, train, eval after step 6, ...
    assert _phases(server) == [TRAIN, EVAL, TRAIN, EVAL, TRAIN, NONE]
    assert len(server.store.metric("rank:0", "scalar.loss")) == 3  # every 2 of 6 steps
    assert server.store.metric("rank:0", "scalar.learning_rate")[0] == pytest.approx(5e-5 * 5 / 6)
    assert len(server.store.metric("rank:0", "scalar.eval_loss")) == 2
    assert server.store.metric("rank:0", "scalar.train_loss") == []  # the summary: no point
    facts = server.store.facts()
    assert facts["run.name_source"] == "transformers args.run_name"
    assert (facts["phases.eval_count"], facts["callbacks.framework"]) == (2, "transformers")
    assert facts["framework.trainer"] == "transformers"  # the fixes' snippets follow it
    # Steps are still the optimizer's (12 backwards, 6 steps), counted once.
    assert server.store.steps() == list(range(6))
    assert (facts["steps.source"], facts["workload.kind"]) == ("optimizer", "training")


def test_a_name_given_to_the_agent_wins_over_the_trainers(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    _attached(HF_TRAINER, tmp_path, server, agent_env, "--name", "my-name")
    assert _run_names(server) == []
    assert {b["name"] for b in server.store.starts.values()} == {"my-name"}
    assert server.store.steps() == list(range(6))


def test_the_lightning_callback_names_the_run_marks_phases_and_sends_loss_and_lr(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _attached(LIGHTNING_TRAINER, tmp_path, server, agent_env) == "global_step 10\n"
    assert _run_names(server) == ["regressor"]  # the logger's name
    # the sanity check's validation, then training with a validation after each epoch
    assert _phases(server) == [EVAL, NONE, TRAIN, EVAL, TRAIN, EVAL, TRAIN, NONE]
    losses = server.store.metric("rank:0", "scalar.loss")
    assert len(losses) == 5 and all(v > 0 for v in losses)  # every 2 of 10 steps
    assert server.store.metric("rank:0", "scalar.learning_rate") == [0.01] * 5
    assert len(server.store.metric("rank:0", "scalar.val.loss")) == 2  # not the sanity check
    assert server.store.metric("rank:0", "scalar.train_loss") == []  # training's: not resent
    facts = server.store.facts()
    assert facts["run.name_source"] == "lightning logger.name"
    assert facts["framework.trainer"] == "lightning"
    assert server.store.steps() == list(range(10))  # validation batches are not steps
    assert facts["steps.source"] == "optimizer"


MISSING_FRAMEWORK = """
import sys
sys.modules["transformers"] = None  # as if it were not installed
import perfweb_agent.callbacks
try:
    perfweb_agent.callbacks.PerfwebCallback
except ImportError as error:
    print(error)
"""


def test_the_package_imports_without_the_framework_and_says_what_to_install(
    tmp_path: Path,
) -> None:
    path = write_script(tmp_path, MISSING_FRAMEWORK)
    result = subprocess.run(
        [sys.executable, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("perfweb_agent.callbacks.PerfwebCallback needs transformers")
    assert "pip install transformers" in result.stdout


def test_a_callback_without_an_agent_does_nothing_and_says_how_to_attach(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from perfweb_agent.callbacks.bridge import AgentBridge
    from perfweb_agent.core.logger import _said
    from perfweb_agent.core.logger import log as agent_log

    _said.discard("callback-without-agent")
    agent_log.addHandler(caplog.handler)
    try:
        bridge: Any = AgentBridge("transformers")
        bridge.name_run("x", source="args.run_name")
        bridge.enter("train")
        bridge.scalars({"loss": 1.0})
    finally:
        agent_log.removeHandler(caplog.handler)
    assert "no agent is running in this process" in caplog.text
