"""Tiny CPU scripts, each recorded once per test session by the agent of this checkout
(`perf-agent attach --offline`), for the reports' attribution: how many ranks run on the
host, which DataLoader the training loop waits on, epoch boundaries, evaluation before the
first optimizer step, a run that crashes. The `recorded` fixture (tests/recommender/conftest.py)
attaches a script the first time a test asks for it and hands every later test the same
directory."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.agent.conftest import ROOT, attach


@dataclass(frozen=True)
class Recorded:
    """One recorded run: its offline directory and how the script ended."""

    offline: Path
    returncode: int
    stdout: str
    stderr: str


FREE_PORT = """
import socket
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
"""

FORKED_WORK = """
import torch, torch.distributed as dist
from torch import nn

def work(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(12):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    dist.destroy_process_group()
"""

SCRIPTS = {
    # Two ranks of one host started by torch.multiprocessing.spawn (no LOCAL_WORLD_SIZE),
    # meeting on 127.0.0.1: right for one host, no multi-node hang.
    "spawn_ddp": FREE_PORT
    + """
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn

def work(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(12):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(work, args=(2, free_port()), nprocs=2)
    print("done")
""",
    # Two ranks forked by multiprocessing's fork context (torch imported before the fork,
    # no LOCAL_WORLD_SIZE), a gloo group on 127.0.0.1, 12 steps each.
    "fork_ddp": FREE_PORT
    + FORKED_WORK
    + """
import multiprocessing as mp

if __name__ == "__main__":
    port = free_port()
    ranks = [mp.get_context("fork").Process(target=work, args=(r, 2, port)) for r in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    print("done" if all(p.exitcode == 0 for p in ranks) else "failed")
""",
    # The same two ranks forked by hand: os.fork, then os._exit in each child.
    "os_fork_ddp": FREE_PORT
    + FORKED_WORK
    + """
import os

if __name__ == "__main__":
    port, children = free_port(), []
    for rank in range(2):
        pid = os.fork()
        if pid == 0:
            work(rank, 2, port)
            os._exit(0)
        children.append(pid)
    codes = [os.waitpid(pid, 0)[1] for pid in children]
    print("done" if codes == [0, 0] else "failed")
""",
    # Two trainers forked by hand with no process group (a sweep): 5 steps each.
    "os_fork_plain": """
import os, torch
from torch import nn

if __name__ == "__main__":
    children = []
    for seed in range(2):
        pid = os.fork()
        if pid == 0:
            torch.manual_seed(seed)
            model = nn.Linear(8, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for _ in range(5):
                opt.zero_grad()
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
            os._exit(0)
        children.append(pid)
    codes = [os.waitpid(pid, 0)[1] for pid in children]
    print("done" if codes == [0, 0] else "failed")
""",
    # A training loader with 1 worker (not persistent) whose samples take 4 ms each, one in 96
    # 0.3 s (the loop waits on it; now and then a long stall), that never reaches the end of
    # its 512 batches, and an evaluation
    # loader with 0 workers (0.24 s a pass), run once before the first optimizer step (an
    # eval at iteration 0) and again every 15 steps: slow steps, but no epoch boundary.
    "two_loaders": """
import time, torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        time.sleep(0.3 if i % 96 == 95 else 0.004)  # now and then a slow read
        return torch.randn(8), torch.randn(1)

class Held(Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        time.sleep(0.015)
        return torch.randn(8), torch.randn(1)

if __name__ == "__main__":
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(Slow(), batch_size=8, num_workers=1)
    held = DataLoader(Held(), batch_size=4, num_workers=0)

    def evaluate():
        model.eval()
        with torch.no_grad():
            for x, y in held:
                model(x)
        model.train()

    for step, (x, y) in enumerate(train):
        if step % 15 == 0:
            evaluate()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step == 44:
            break
    print("done")
""",
    # Six epochs of 4 batches over a loader whose one worker takes 0.2 s to start (it opens
    # its files again) and is not kept between epochs: a stall at every epoch start.
    "epochs": """
import time, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

def reopen(worker_id):
    time.sleep(0.2)

if __name__ == "__main__":
    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=8, num_workers=1, worker_init_fn=reopen)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(6):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    print("done")
""",
    # A script that trains (30 optimizer steps, an evaluation of 2 batches before every 10th)
    # and then serves 20 requests of one sample each on the same model.
    "train_then_serve": """
import time, torch
from torch import nn

if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(30):
        if step % 10 == 9:
            model.eval()
            with torch.no_grad():
                for _ in range(2):
                    model(torch.randn(8, 16))
            model.train()
        opt.zero_grad()
        model(torch.randn(8, 16)).pow(2).mean().backward()
        opt.step()
    model.eval()
    with torch.inference_mode():
        for request in range(20):
            model(torch.randn(1, 16))
            time.sleep(0.005)
    print("done")
""",
    # The same, but it serves a second copy of the model: calls the agent does not time.
    "train_then_serve_a_copy": """
import copy, time, torch
from torch import nn

if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(30):
        opt.zero_grad()
        model(torch.randn(8, 16)).pow(2).mean().backward()
        opt.step()
    served = copy.deepcopy(model).eval()
    with torch.inference_mode():
        for request in range(20):
            served(torch.randn(1, 16))
            time.sleep(0.005)
    print("done")
""",
    # A Hugging Face Trainer (6 optimizer steps: 24 samples, batch 4, 2 accumulated, 2 epochs)
    # and then a text-classification pipeline on the trained model, 10 requests.
    "hf_train_then_pipeline": """
import tempfile
import torch
from torch.utils.data import Dataset
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import (BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast,
                          Trainer, TrainingArguments, pipeline)
from transformers.trainer_callback import PrinterCallback

words = ["[UNK]", "[PAD]"] + [f"w{i}" for i in range(98)]
raw = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
raw.pre_tokenizer = Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", pad_token="[PAD]")

class Tiny(Dataset):
    def __len__(self):
        return 24
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(2, 100, (8,), generator=g)
        return {"input_ids": ids, "labels": torch.tensor(i % 2)}

config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16)
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4,
                         num_train_epochs=2, gradient_accumulation_steps=2, report_to=[],
                         save_strategy="no", logging_strategy="no", use_cpu=True,
                         disable_tqdm=True)
trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tiny())
trainer.remove_callback(PrinterCallback)
trainer.train()
classify = pipeline("text-classification", model=trainer.model, tokenizer=tokenizer, device=-1)
for i in range(10):
    classify(f"w{i} w{i + 1} w{i + 2}")
print("done", trainer.state.global_step)
""",
    # Lightning's fit of a LightningModule with a validation loop: 2 sanity-check batches
    # before the first optimizer step, 4 after each epoch's 8 steps (the last after the last
    # step), and nothing served.
    "lightning_fit_with_validation": """
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)
    def forward(self, x):
        return self.layer(x)
    def training_step(self, batch, batch_idx):
        return self(batch[0]).sum()
    def validation_step(self, batch, batch_idx):
        self(batch[0])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def loader(n):
    return DataLoader(TensorDataset(torch.randn(n, 8)), batch_size=2)

trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(Tiny(), loader(16), loader(8))
print("done", trainer.global_step)
""",
    # A run that dies while importing what it needs: exit code 1, one error line.
    "crash_at_import": """
import torch
import a_module_that_is_not_installed
print("never")
""",
}


def record(name: str, folder: Path) -> Recorded:
    """Attach SCRIPTS[name] offline into `folder` (fast ticks, one thread, no profiler)."""
    script = folder / f"{name}.py"
    script.write_text(SCRIPTS[name])
    offline = folder / "offline"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env.update(
        PERF_AGENT_INTERVAL="0.2",
        PERF_AGENT_FLUSH_INTERVAL="0.5",
        PERF_AGENT_PROFILE="0",
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
    )
    done = attach(["--offline", str(offline), "--", sys.executable, str(script)], env, timeout=180)
    return Recorded(
        offline=offline, returncode=done.returncode, stdout=done.stdout, stderr=done.stderr
    )


# The Trainer then a pipeline, evaluating after each epoch: its last evaluation (3 batches of 8)
# follows the last optimizer step, before the pipeline's 10 calls.
SCRIPTS["hf_train_evaluate_then_pipeline"] = (
    SCRIPTS["hf_train_then_pipeline"]
    .replace("disable_tqdm=True)", 'disable_tqdm=True, eval_strategy="epoch")')
    .replace("train_dataset=Tiny())", "train_dataset=Tiny(), eval_dataset=Tiny())")
)
