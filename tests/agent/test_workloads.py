"""Every common loop shape under `perf-agent attach`, scripts unedited: the steps or requests
the script ran are the ones the agent counts, with the boundary it used named in the facts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import attach, online, write_script
from tests.agent.fakeserver import FakeServer

HAND_WRITTEN_UPDATE = """
import io, torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(50, 16), nn.Flatten(), nn.Linear(16 * 5, 50))
criterion = nn.CrossEntropyLoss()
lr, batches = 0.5, 0
for epoch in range(2):
    model.train()
    for _ in range(7):
        data, target = torch.randint(0, 50, (4, 5)), torch.randint(0, 50, (4,))
        model.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        batches += 1
    model.eval()
    with torch.no_grad():  # validation: module calls, which must not count as steps
        for _ in range(3):
            criterion(model(torch.randint(0, 50, (4, 5))), torch.randint(0, 50, (4,)))
    saved = io.BytesIO()
    torch.save(model, saved)  # the whole module, as word_language_model does
    saved.seek(0)
    torch.load(saved, weights_only=False)
print("batches", batches)
"""

INFERENCE_OVER_A_LOADER = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)).eval()
loader = DataLoader(TensorDataset(torch.randn(50, 8)), batch_size=8)
batches = 0
with torch.inference_mode():
    for (x,) in loader:
        model(x).argmax(dim=1)
        batches += 1
print("batches", batches)
"""

REQUEST_AT_A_TIME = """
import time, torch
from torch import nn

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
        self.head = nn.Linear(64, 3)
    def forward(self, x):
        return self.head(self.body(x))

model = Classifier().eval()
served = 0
for request in range(13):
    time.sleep(0.02)  # waiting for the next request: idle, not latency
    with torch.no_grad():
        model(torch.randn(1 + request % 3, 16))
    served += 1
print("served", served)
"""

DATALOADER_ONLY = """
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(30, 4)), batch_size=5)
total = 0
for (x,) in loader:
    total += int(x.shape[0])
print("rows", total)
"""

GRADIENT_ACCUMULATION = """
import torch
from torch import nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
updates = 0
for micro in range(24):
    model(torch.randn(2, 4)).sum().backward()
    if micro % 4 == 3:
        opt.step()
        opt.zero_grad()
        updates += 1
print("updates", updates)
"""

# time_sequence_prediction's shape: LBFGS re-evaluates the loss up to 20 times per step.
LBFGS_CLOSURE = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1)).double()
opt = torch.optim.LBFGS(model.parameters(), lr=0.8)
x, y = torch.randn(32, 4).double(), torch.randn(32, 1).double()
closures = 0
for step in range(3):
    def closure():
        global closures
        closures += 1
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    opt.step(closure)
    with torch.no_grad():  # the script's prediction after each step: not a step
        model(x)
print("steps 3, closures", closures)
"""

# word_language_model/generate.py's shape: a whole module loaded from disk, one call per token
# of a (1, 1) input with the recurrent state passed back in, sampled, written out word by word.
TOKEN_BY_TOKEN_RNN = """
import io, torch
from torch import nn

class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(40, 8)
        self.rnn = nn.LSTM(8, 8)
        self.decoder = nn.Linear(8, 40)
    def forward(self, input, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        return self.decoder(output), hidden

torch.manual_seed(0)
saved = io.BytesIO()
torch.save(RNNModel(), saved)
saved.seek(0)
model = torch.load(saved, weights_only=False)
model.eval()
hidden = (torch.zeros(1, 1, 8), torch.zeros(1, 1, 8))
token = torch.randint(40, (1, 1))
words = []
with torch.no_grad():
    for i in range(30):
        output, hidden = model(token, hidden)
        token.fill_(torch.multinomial(output.squeeze().div(1.0).exp(), 1)[0])
        words.append(int(token))
print("words", len(words))
"""


SPAWNED_DDP = """
import socket, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

def run(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(40, 8), torch.randn(40, 1))
    loader = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context="spawn")
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(2, port), nprocs=2)
    print("spawned 2 ranks")
"""


def _ran(script: str, tmp_path: Path, server: FakeServer, env: dict[str, str]) -> str:
    path = write_script(tmp_path, script)
    result = attach([*online(server), "--", sys.executable, str(path)], env, timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _workers(server: FakeServer) -> dict[str, dict[str, Any]]:
    """The start bodies of the processes that reported (not the launcher), by agent id."""
    return {a: b for a, b in server.store.starts.items() if b["role"] == "worker"}


def _facts_of(server: FakeServer, agent_id: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in sorted(server.store.batches):
        if key[1] == agent_id:
            merged.update(server.store.batches[key].get("facts") or {})
    return merged


def test_it_counts_each_backward_of_a_loop_that_updates_weights_by_hand(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(HAND_WRITTEN_UPDATE, tmp_path, server, agent_env) == "batches 14\n"
    assert server.store.steps() == list(range(14))  # validation calls are not steps
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("backward", "training")
    assert server.store.metric("rank:0", "step.batch_size") == [4.0] * 14


def test_it_counts_each_batch_of_inference_over_a_dataloader_with_its_size(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(INFERENCE_OVER_A_LOADER, tmp_path, server, agent_env) == "batches 7\n"
    assert server.store.steps() == list(range(7))
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("module", "inference")
    assert server.store.metric("rank:0", "step.batch_size") == [8.0] * 6 + [2.0]


def test_it_counts_requests_served_one_call_at_a_time_without_the_idle_time_between(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(REQUEST_AT_A_TIME, tmp_path, server, agent_env) == "served 13\n"
    assert server.store.steps() == list(range(13))
    assert server.store.facts()["steps.source"] == "module"
    sizes = server.store.metric("rank:0", "step.batch_size")
    assert sizes == [float(1 + r % 3) for r in range(13)]
    latencies = server.store.step_columns()["duration"]
    assert sorted(latencies)[6] < 0.01  # the sleep(0.02) before each request is not latency


def test_a_loop_with_only_a_dataloader_counts_its_batches(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(DATALOADER_ONLY, tmp_path, server, agent_env) == "rows 30\n"
    assert server.store.steps() == list(range(6))
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("dataloader", "inference")
    assert server.store.metric("rank:0", "step.batch_size") == [5.0] * 6


def test_gradient_accumulation_counts_optimizer_steps_not_backwards(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(GRADIENT_ACCUMULATION, tmp_path, server, agent_env) == "updates 6\n"
    assert server.store.steps() == list(range(6))
    assert server.store.facts()["steps.source"] == "optimizer"


@pytest.mark.timeout(240)
def test_ranks_started_by_mp_spawn_report_as_ranks_and_their_loader_workers_do_not(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(SPAWNED_DDP, tmp_path, server, agent_env) == "spawned 2 ranks\n"
    workers = _workers(server)
    ranks = {body["rank"]: agent for agent, body in workers.items() if body["rank"] is not None}
    assert sorted(ranks) == [0, 1]
    assert len(workers) == 3  # the script and its two ranks; no DataLoader worker
    for rank, agent_id in ranks.items():
        assert server.store.steps(agent_id) == list(range(5))
        facts = _facts_of(server, agent_id)
        assert facts["steps.source"] == "optimizer"
        assert (facts["distributed.rank"], facts["distributed.world_size"]) == (rank, 2)
        assert server.store.finishes[agent_id]["produced"]["steps"] == 5
    assert server.store.metric("process:1", "process.rss")
    host_senders = {
        agent
        for (_, agent, _), body in server.store.batches.items()
        for m in body["metrics"]
        if m["device"] == "host"
    }
    assert host_senders and host_senders.isdisjoint(ranks.values())  # the script's, once


HF_TRAINER = """
import os, sys
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback

class Tiny(Dataset):
    def __len__(self):
        return 24
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 100, (8,), generator=g)
        return {"input_ids": ids, "labels": torch.tensor(i % 2)}

config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16)
args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=4,
                         num_train_epochs=2, gradient_accumulation_steps=2, report_to=[],
                         save_strategy="no", logging_strategy="no", use_cpu=True,
                         disable_tqdm=True)
trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tiny())
trainer.remove_callback(PrinterCallback)
trainer.train()
print("global_step", trainer.state.global_step)
"""

LIGHTNING_TRAINER = """
import torch, lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)
    def validation_step(self, batch, _):
        x, y = batch
        self.log("val", nn.functional.mse_loss(self.net(x), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = TensorDataset(torch.randn(40, 8), torch.randn(40, 1))
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(Regressor(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
print("global_step", trainer.global_step)
"""


@pytest.mark.timeout(240)
def test_a_hugging_face_trainer_with_gradient_accumulation_counts_its_optimizer_steps(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    path = write_script(tmp_path, HF_TRAINER)
    env = {**agent_env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = attach(
        [*online(server), "--", sys.executable, str(path), str(tmp_path / "out")], env, 180
    )
    assert (result.returncode, result.stdout) == (0, "global_step 6\n"), result.stderr
    assert server.store.steps() == list(range(6))  # 12 backwards, 6 optimizer steps
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("optimizer", "training")
    assert set(server.store.metric("rank:0", "step.batch_size")) == {4.0}


@pytest.mark.timeout(240)
def test_a_lightning_trainer_counts_its_optimizer_steps_not_its_validation_batches(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(LIGHTNING_TRAINER, tmp_path, server, agent_env) == "global_step 10\n"
    assert server.store.steps() == list(range(10))
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("optimizer", "training")


SPAWNED_POOL = """
import multiprocessing as mp
import torch
from torch import nn

def serve(batch):
    model = getattr(serve, "model", None)
    if model is None:
        model = serve.model = nn.Linear(4, 2).eval()
    with torch.inference_mode():
        return model(torch.randn(batch, 4)).shape[0]

if __name__ == "__main__":
    pool = mp.get_context("spawn").Pool(2)
    served = sum(pool.map(serve, [3] * 10, chunksize=1))
    pool.close()
    pool.join()
    print("served", served)
"""


@pytest.mark.timeout(240)
def test_an_inference_pool_of_spawned_workers_reports_each_worker_as_a_rank(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(SPAWNED_POOL, tmp_path, server, agent_env) == "served 30\n"
    ranks = {b["rank"]: a for a, b in _workers(server).items() if b["rank"] is not None}
    assert sorted(ranks) == [0, 1]  # Process-1 and Process-2 of the pool
    assert sum(len(server.store.steps(agent)) for agent in ranks.values()) == 10
    for agent_id in ranks.values():
        assert agent_id in server.store.finishes  # flushed at the end of its bootstrap
        if server.store.steps(agent_id):
            assert _facts_of(server, agent_id)["steps.source"] == "module"
    sizes = [v for rank in ranks for v in server.store.metric(f"rank:{rank}", "step.batch_size")]
    assert sizes == [3.0] * 10


HF_GENERATE = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=64)
model = GPT2LMHeadModel(config).eval()
prompts = torch.randint(0, 64, (3, 5))
for _ in range(6):  # six requests of 3 prompts, 8 new tokens each
    out = model.generate(prompts, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                         pad_token_id=0)
print("generated", tuple(out.shape))
"""


def test_each_hugging_face_generate_call_is_one_request_not_one_per_token(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(HF_GENERATE, tmp_path, server, agent_env) == "generated (3, 13)\n"
    assert server.store.steps() == list(range(6))  # not 6 x 8 decoding steps
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("module", "inference")
    assert facts["model.class"] == "GPT2LMHeadModel"
    assert server.store.metric("rank:0", "step.batch_size") == [3.0] * 6


def test_an_lbfgs_step_counts_once_however_many_closures_it_runs(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    out = _ran(LBFGS_CLOSURE, tmp_path, server, agent_env)
    assert out.startswith("steps 3, closures ") and int(out.split()[-1]) > 3
    assert server.store.steps() == list(range(3))  # not one per closure's backward
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("optimizer", "training")


def test_token_by_token_sampling_of_a_loaded_rnn_counts_each_call_as_a_request(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    assert _ran(TOKEN_BY_TOKEN_RNN, tmp_path, server, agent_env) == "words 30\n"
    assert server.store.steps() == list(range(30))
    facts = server.store.facts()
    assert (facts["steps.source"], facts["workload.kind"]) == ("module", "inference")
    assert facts["model.class"] == "RNNModel"
    assert server.store.metric("rank:0", "step.batch_size") == [1.0] * 30
