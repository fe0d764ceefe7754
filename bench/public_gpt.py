"""Public GPT trainers and samplers, an HF Trainer + pipeline and a Lightning fit, unchanged.

    python bench/public_gpt.py NANOGPT MINGPT [--runs 3] [--only a,b]
                               [--out bench/results/public_gpt.json]

NANOGPT and MINGPT are karpathy/nanoGPT and karpathy/minGPT work trees or bare git
directories (a bare one is exported with `git archive`). Each script runs bare and under
`perf-agent attach --offline` `--runs` times, interleaved, through bench/public_scripts.py's
own case runner (exit codes, stdout byte-identical once the timings the script prints are
masked, what the agent counted against what ran, the top findings, wall bare vs attached).
Only the data and the size are the bench's: nanoGPT's own data/shakespeare_char/prepare.py
on a synthetic text (no download), its shakespeare_char config shrunk by its own
command-line overrides (2 layers, 64 wide, blocks of 64, 41 iterations with an evaluation at
iterations 0, 20 and 40), then sample.py on the checkpoint it wrote; minGPT's
projects/adder through its Trainer class for 100 iterations (`--trainer.max_iters`), whose
callback evaluates the train and test splits (two more DataLoaders, greedy `generate`) after
the first. The Hugging Face script (a tiny GPT-2 from a config, `Trainer` with an evaluation
every 20 of its 40 steps, then 20 `pipeline("text-generation")` calls) and the Lightning one
(the package's own `BoringModel` demo, `Trainer.fit` for 2 epochs with its validation loop)
are written by the bench: neither package ships an example that runs offline.
nanoGPT's prepare.py and sample.py import `requests` and `tiktoken`, which the project does
not depend on: `.venv/bin/pip install requests tiktoken` first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import public_scripts as ps  # bench/ is on sys.path as a script: the runner this one reuses

HF_TRAIN_SERVE = textwrap.dedent(
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Trainer,
                              TrainingArguments, pipeline)
    torch.manual_seed(0)
    words = [f"w{i}" for i in range(200)]
    vocab = {"<pad>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>",
                                        eos_token="<eos>")
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=len(vocab),
                                       n_positions=64, pad_token_id=0, bos_token_id=1,
                                       eos_token_id=1))

    class Texts(torch.utils.data.Dataset):
        def __init__(self, n):
            self.ids = torch.randint(2, len(vocab), (n, 32),
                                     generator=torch.Generator().manual_seed(n))
        def __len__(self):
            return len(self.ids)
        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    args = TrainingArguments(output_dir="out", max_steps=40, per_device_train_batch_size=8,
                             per_device_eval_batch_size=8, eval_strategy="steps",
                             eval_steps=20, logging_steps=10, save_strategy="no",
                             report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Texts(400),
                      eval_dataset=Texts(48))
    trainer.train()
    generate = pipeline("text-generation", model=trainer.model, tokenizer=tokenizer,
                        device="cpu")
    for i in range(20):
        out = generate(" ".join(words[i:i + 4]), max_new_tokens=8, do_sample=False)
        print(i, len(out[0]["generated_text"].split()))
    """
)

LIGHTNING_FIT = textwrap.dedent(
    """
    import lightning as L
    from lightning.pytorch.demos.boring_classes import BoringModel
    L.seed_everything(0)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(BoringModel())
    print("global_step", trainer.global_step)
    """
)

NANOGPT_TRAIN = [
    "train.py",
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--n_layer=2",
    "--n_head=2",
    "--n_embd=64",
    "--block_size=64",
    "--batch_size=8",
    "--dropout=0.0",
    "--max_iters=40",
    "--lr_decay_iters=40",
    "--eval_interval=20",
    "--eval_iters=5",
    "--log_interval=1",
]
MS_TIME = (r"(time|iter_dt) [\d.]+ms", r"\1 <t>ms")  # nanoGPT's and minGPT's step times
MFU = (r"mfu -?[\d.]+%", "mfu <p>%")  # nanoGPT's MFU, from its step time
HF_RATES = (r"'(\w+_(?:runtime|per_second))': '[\d.e+-]+'", r"'\1': <t>")  # Trainer's logs


def _synthetic_text(path: Path, lines: int = 3000) -> None:
    """A character corpus of ~110 k characters in place of tiny-shakespeare's download."""
    rng = random.Random(0)
    words = [
        "the",
        "king",
        "queen",
        "lord",
        "my",
        "thou",
        "art",
        "what",
        "shall",
        "we",
        "do",
        "with",
        "love",
        "and",
        "death",
        "of",
        "night",
    ]
    text = "\n".join(
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + "."
        for _ in range(lines)
    )
    path.write_text(text + "\n")


def _cases(nanogpt: Path, mingpt: Path, work: Path) -> list[dict[str, Any]]:
    (work / "hf_train_serve.py").write_text(HF_TRAIN_SERVE)
    (work / "lightning_fit.py").write_text(LIGHTNING_FIT)
    out = work / "nanogpt-out"
    return [
        {
            "name": "nanoGPT train.py (shakespeare_char, tiny)",
            "cwd": nanogpt,
            "argv": [*NANOGPT_TRAIN, f"--out_dir={out}"],
            "needs": ["numpy"],
            "masks": [MS_TIME, MFU],
            "count_lines": r"^iter \d+: loss",  # --log_interval=1: a line per optimizer step
            "expect": {"kind": "training", "source": "optimizer", "count": 41, "served": 0},
            "what": "41 iterations (0..40, one AdamW step each, no accumulation), an "
            "estimate_loss() of 2x5 forwards in eval()/no_grad at iterations 0, 20 and 40 "
            "(the first before any optimizer step), a checkpoint at 20 and 40",
        },
        {
            "name": "nanoGPT sample.py",
            "cwd": nanogpt,
            "argv": [
                "sample.py",
                f"--out_dir={out}",
                "--device=cpu",
                "--dtype=float32",
                "--num_samples=5",
                "--max_new_tokens=50",
            ],
            "needs": ["tiktoken"],
            "needs_file": out / "ckpt.pt",
            "expect": {"kind": "inference", "source": "module", "count": 250},
            "what": "5 samples of 50 new tokens from the train case's checkpoint: GPT.generate "
            "calls the model once per token (250 calls), no KV cache, under no_grad",
        },
        {
            "name": "minGPT projects/adder (its Trainer)",
            "cwd": mingpt,
            "argv": [
                "projects/adder/adder.py",
                "--trainer.max_iters=100",
                f"--system.work_dir='{work / 'adder'}'",
            ],
            "pythonpath": [str(mingpt)],  # `from mingpt.model import GPT`, as its readme says
            "needs": [],
            "masks": [MS_TIME],
            "expect": {"kind": "training", "source": "optimizer", "count": 100, "served": 0},
            "what": "100 iterations of mingpt.trainer.Trainer (a 4-worker DataLoader on an "
            "infinite RandomSampler, pin_memory=True), after the first its callback's "
            "eval_split of train (95 batches) and test (5) through two 0-worker DataLoaders, "
            "3 greedy generate() calls a batch, in eval()/no_grad",
        },
        {
            "name": "Hugging Face Trainer + pipeline (tiny GPT-2 from a config)",
            "cwd": work,
            "argv": [str(work / "hf_train_serve.py")],
            "needs": ["transformers"],
            "masks": [HF_RATES],
            "expect": {"kind": "training", "source": "optimizer", "count": 40, "served": 20},
            "what": "Trainer: 40 steps, an evaluation of 6 batches at steps 20 and 40 (the "
            "last after the last optimizer step); then 20 pipeline('text-generation') calls",
        },
        {
            "name": "Lightning fit (lightning.pytorch.demos BoringModel)",
            "cwd": work,
            "argv": [str(work / "lightning_fit.py")],
            "needs": ["lightning"],
            "expect": {"kind": "training", "source": "optimizer", "count": 128, "served": 0},
            "what": "Trainer.fit, 2 epochs of 64 batches (128 optimizer steps), the sanity "
            "check's 2 validation batches before the first step, 64 after each epoch",
        },
    ]


def _prepare_nanogpt(nanogpt: Path) -> None:
    """nanoGPT's own prepare.py, on a synthetic input.txt it then finds in place."""
    folder = nanogpt / "data" / "shakespeare_char"
    _synthetic_text(folder / "input.txt")
    subprocess.run(
        [ps.PY, str(folder / "prepare.py")], check=True, capture_output=True, timeout=ps.TIMEOUT_S
    )


def bench(nanogpt: Path, mingpt: Path, *, runs: int, only: set[str] | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="public-gpt-") as tmp:
        work = Path(tmp)
        trees = {}
        for name, source in (("nanoGPT", nanogpt), ("minGPT", mingpt)):
            trees[name] = _tree(source, work / name)
        _prepare_nanogpt(trees["nanoGPT"])
        results = []
        for case in _cases(trees["nanoGPT"], trees["minGPT"], work):
            if only and not any(o in case["name"] for o in only):
                continue
            load_before = os.getloadavg()[0]
            row = ps._bench_case(case, work, runs=runs)
            row["load_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "report_text"}), flush=True)
    return {
        "date": datetime.date.today().isoformat(),
        "nanogpt_commit": ps._commit(nanogpt),
        "mingpt_commit": ps._commit(mingpt),
        "runs": runs,
        "load": os.getloadavg(),
        "cpus": os.cpu_count(),
        "torch": ps._version("torch"),
        "transformers": ps._version("transformers"),
        "lightning": ps._version("lightning"),
        "scripts": results,
    }


def _tree(source: Path, into: Path) -> Path:
    """A work tree of `source`: itself, or a bare git directory exported by `git archive`."""
    if (source / ".git").exists() or not (source / "HEAD").is_file():
        return source
    into.mkdir()
    archive = subprocess.run(
        ["git", "--git-dir", str(source), "archive", "HEAD"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def markdown(result: dict[str, Any]) -> str:
    """The results' header line and table."""
    header = (
        f"karpathy/nanoGPT `{result['nanogpt_commit'][:12]}`, karpathy/minGPT "
        f"`{result['mingpt_commit'][:12]}`, {result['date']}, torch {result['torch']}, "
        f"transformers {result['transformers']}, lightning {result['lightning']}, "
        f"{result['cpus']} CPUs, load {result['load'][0]:.1f}, {result['runs']} runs each "
        "(median, min-max)."
    )
    return header + "\n\n" + ps.table(result["scripts"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nanogpt", type=Path, help="karpathy/nanoGPT work tree or bare git dir")
    parser.add_argument("mingpt", type=Path, help="karpathy/minGPT work tree or bare git dir")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated parts of script names")
    parser.add_argument("--out", type=Path, default=ps.ROOT / "bench/results/public_gpt.json")
    args = parser.parse_args()
    only = {o for o in args.only.split(",") if o} or None
    ps.write(bench(args.nanogpt, args.mingpt, runs=args.runs, only=only), args.out, markdown)


if __name__ == "__main__":
    main()
