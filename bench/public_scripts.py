"""Public scripts we did not write, run unchanged bare and under `perf-agent attach --offline`.

    python bench/public_scripts.py PATH_TO_PYTORCH_EXAMPLES [--runs 3] [--only a,b]
                                   [--out bench/results/public_scripts.json]

PATH is a pytorch/examples work tree or bare git directory (a bare one is exported with
`git archive` into a temporary folder). The bench prepares the synthetic data each script
reads (no downloads: a tiny word corpus for word_language_model, the sine-wave file of
time_sequence_prediction, a fake MNIST in torchvision's raw format for mnist and vae, the
`fake` dataset of dcgan, `--dummy` for imagenet, a random fast_neural_style model and a
256x256 content image), then per script runs it bare and attached `--runs` times,
interleaved, and records per script: the exit codes (shell-style: a run ended by signal N is
128 + N) and whether stdout is byte-identical (timings the script prints itself are masked;
imagenet, whose `--dummy` epoch no flag of the script bounds, is stopped by SIGINT after 40 s
as a user stops it, and compares the lines both arms printed),
the steps/requests the agent counted against what the script really ran, `steps.source`, the
workload kind, ranks, traces, the coverage verdict and statement, the top findings of
`python -m perfweb_recommender analyze` (text and JSON), and the wall time bare vs attached (median,
min-max; overhead = ratio of medians). A script whose imports are missing here (torchvision,
transformers, matplotlib) or that needs a GPU is reported `not run` with the reason: never
counted as a pass; time_sequence_prediction (minutes per step on a shared 2-core CPU) runs
only when `--only` names it. The Hugging Face case is a `generate()` script of ours on a tiny GPT-2
built from a config (pytorch/examples has none). Writes the JSON and a Markdown table
(`--out` with `.md`).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
PERF_AGENT = str(Path(PY).parent / "perf-agent")  # the console script, as a user runs it
TIMEOUT_S = 600

HF_GENERATE = textwrap.dedent(
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=500,
                                       n_positions=128)).eval()
    for i in range(12):
        ids = torch.randint(0, 500, (2, 8))
        out = model.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=0)
        print(i, out.shape[1])
    """
)


def _corpus(folder: Path) -> None:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in (("train.txt", 400), ("valid.txt", 60), ("test.txt", 60)):
        text = "\n".join(
            " ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) for _ in range(lines)
        )
        (folder / name).write_text(text + "\n")


def _fake_mnist(raw: Path, train: int = 640, test: int = 200) -> None:
    """MNIST in torchvision's raw (uncompressed idx) format, so `download=True` finds it."""
    rng = random.Random(0)
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", train), ("t10k", test)):
        images = bytes(rng.randrange(256) for _ in range(n * 28 * 28))
        labels = bytes(rng.randrange(10) for _ in range(n))
        header = struct.pack(">IIII", 2051, n, 28, 28)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + images)
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels)


def _export(examples: Path, into: Path) -> Path:
    if (examples / "mnist").is_dir():
        return examples
    names = subprocess.run(
        ["git", "-C", str(examples), "ls-tree", "-r", "--name-only", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # Large data files of the corpus may be absent from a mirror; the bench makes its own.
    keep = [n for n in names if not n.startswith("word_language_model/data/")]
    tree = into / "examples"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(examples), "archive", "HEAD", *keep], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _commit(examples: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(examples), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def _cases(tree: Path, work: Path) -> list[dict[str, Any]]:
    """Each case: folder to run in, argv, the modules it needs, what it really runs."""
    corpus = work / "corpus"
    wlm = work / "wlm.pt"
    (work / "hf_generate.py").write_text(HF_GENERATE)
    data_root = work / "data"  # mnist and vae read '../data' from their own folder's sibling
    return [
        {
            "name": "word_language_model (train)",
            "cwd": tree / "word_language_model",
            "argv": [
                "main.py",
                "--data",
                str(corpus),
                "--epochs",
                "1",
                "--emsize",
                "32",
                "--nhid",
                "32",
                "--bptt",
                "20",
                "--save",
                str(wlm),
            ],
            "needs": [],
            "expect": {"kind": "training", "source": "backward", "count": 11},
            "what": "1 epoch, 11 batches of 20x20 tokens, weights updated by hand (p.data.add_)",
        },
        {
            "name": "word_language_model generate.py (inference)",
            "cwd": tree / "word_language_model",
            "argv": [
                "generate.py",
                "--data",
                str(corpus),
                "--checkpoint",
                str(wlm),
                "--words",
                "200",
                "--outf",
                str(work / "generated.txt"),
            ],
            "needs": [],
            "needs_file": wlm,
            "expect": {"kind": "inference", "source": "module", "count": 200},
            "what": "200 words, one model call each, eval() + no_grad",
        },
        {
            "name": "regression",
            "cwd": tree / "regression",
            "argv": ["main.py"],
            "needs": [],
            "unseeded": True,
            "expect": {"kind": "training", "source": "backward", "count": None},
            "what": "fits a polynomial to loss < 1e-3, updates by hand (count printed, unseeded)",
        },
        {
            "name": "time_sequence_prediction",
            "cwd": work / "tsp",
            "argv": [str(tree / "time_sequence_prediction" / "train.py"), "--steps", "2"],
            "needs": ["matplotlib", "numpy"],
            "prepare": "tsp",
            "slow": True,
            "expect": {"kind": "training", "source": "optimizer", "count": None},
            "what": "LBFGS, 2 steps (each step() runs up to 20 closures)",
        },
        # Batches of 16: 40 steps, so the profiler window (after step 20) opens in them.
        {
            "name": "mnist",
            "cwd": tree / "mnist",
            "argv": [
                "main.py",
                "--epochs",
                "1",
                "--batch-size",
                "16",
                "--test-batch-size",
                "100",
                "--no-accel",
            ],
            "needs": ["torchvision"],
            "prepare": "mnist",
            "data": data_root,
            "expect": {"kind": "training", "source": "optimizer", "count": 40},
            "what": "1 epoch over a fake MNIST of 640 images: 40 optimizer steps, then a test "
            "pass of 2 batches in eval() + no_grad",
        },
        {
            "name": "vae",
            "cwd": tree / "vae",
            "argv": ["main.py", "--epochs", "1", "--batch-size", "16", "--no-accel"],
            "needs": ["torchvision"],
            "prepare": "mnist",
            "data": data_root,
            "expect": {"kind": "training", "source": "optimizer", "count": 40},
            "what": "1 epoch over a fake MNIST of 640 images: 40 optimizer steps, then a test "
            "pass of 13 batches and a decode of 64 samples in eval() + no_grad",
        },
        # --dummy is 1,281,167 FakeData images an epoch and no flag of the script bounds the
        # steps (~5 s a step of 8 here): it is stopped as a user stops it, with SIGINT to the
        # command (perf-agent forwards it), and what ran is the last step it printed (-p 1).
        {
            "name": "imagenet --dummy resnet18",
            "cwd": tree / "imagenet",
            "argv": [
                "main.py",
                "--dummy",
                "-a",
                "resnet18",
                "--epochs",
                "1",
                "-b",
                "8",
                "-j",
                "0",
                "--no-accel",
                "--seed",
                "0",
                "-p",
                "1",
            ],
            "needs": ["torchvision"],
            "interrupt_after_s": 40.0,
            "expect": {"kind": "training", "source": "optimizer", "count": None, "rc": 130},
            "what": "resnet18 on the script's FakeData, batches of 8, SIGINT after 40 s",
        },
        # dcgan steps two optimizers an iteration (D's, then G's) after three backwards: an
        # iteration is one step. --manualSeed: unseeded, the script draws its own seed.
        {
            "name": "dcgan --dataset fake",
            "cwd": tree / "dcgan",
            "argv": [
                "main.py",
                "--dataset",
                "fake",
                "--dry-run",
                "--niter",
                "1",
                "--batchSize",
                "8",
                "--workers",
                "0",
                "--manualSeed",
                "1",
                "--outf",
                str(work / "dcgan"),
            ],
            "needs": ["torchvision"],
            "expect": {"kind": "training", "source": "optimizer", "count": 1},
            "what": "one training cycle (--dry-run)",
        },
        {
            "name": "dcgan --dataset fake (1 epoch)",
            "cwd": tree / "dcgan",
            "argv": [
                "main.py",
                "--dataset",
                "fake",
                "--niter",
                "1",
                "--batchSize",
                "16",
                "--workers",
                "0",
                "--manualSeed",
                "1",
                "--ngf",
                "8",
                "--ndf",
                "8",
                "--outf",
                str(work / "dcgan"),
            ],
            "needs": ["torchvision"],
            "expect": {"kind": "training", "source": "optimizer", "count": 63},
            "what": "1 epoch of FakeData's 1,000 images in batches of 16 (8 filters, not 64: "
            "CPU time): 63 iterations, each 3 backwards and 2 optimizer steps",
        },
        {
            "name": "fast_neural_style eval (inference)",
            "cwd": tree / "fast_neural_style",
            "argv": [
                "neural_style/neural_style.py",
                "eval",
                "--content-image",
                str(work / "content.jpg"),
                "--model",
                str(work / "style.pth"),
                "--output-image",
                str(work / "styled.jpg"),
            ],
            "needs": ["torchvision"],
            "prepare": "style",
            "expect": {"kind": "inference", "source": "module", "count": 1},
            "what": "one no_grad call of a TransformerNet of random weights on a 256x256 image",
        },
        {
            "name": "distributed/ddp example.py (torchrun)",
            "cwd": tree / "distributed" / "ddp",
            "argv": ["-m", "torch.distributed.run", "--nproc_per_node=2", "example.py"],
            "needs": [],
            "skips": "Unable to locate sufficient",
            "expect": {"kind": "training", "source": "optimizer", "count": 1},
            "what": "needs 2 accelerators: the model is moved to device index `rank`",
        },
        {
            "name": "Hugging Face generate() (tiny GPT-2 from a config)",
            "cwd": work,
            "argv": [str(work / "hf_generate.py")],
            "needs": ["transformers"],
            "expect": {"kind": "inference", "source": "module", "count": 12},
            "what": "12 generate() calls of 16 new tokens each",
        },
    ]


def _prepare(case: dict[str, Any], work: Path) -> None:
    kind = case.get("prepare")
    if kind == "mnist":
        _fake_mnist(case["cwd"].parent / "data" / "MNIST" / "raw")
    if kind == "style":
        # The script's own TransformerNet with random weights (no pretrained download), and
        # its sample image at 256x256 (--content-scale resizes with Image.ANTIALIAS, which
        # Pillow 10 removed).
        folder = case["cwd"] / "neural_style"
        code = textwrap.dedent(f"""
            import sys, torch
            from PIL import Image
            sys.path.insert(0, {str(folder)!r})
            from transformer_net import TransformerNet
            torch.manual_seed(0)
            torch.save(TransformerNet().state_dict(), {str(work / "style.pth")!r})
            image = Image.open({str(case["cwd"] / "images/content-images/amber.jpg")!r})
            image.convert("RGB").resize((256, 256)).save({str(work / "content.jpg")!r})
        """)
        subprocess.run([PY, "-c", code], check=True, timeout=TIMEOUT_S)
    if kind == "tsp":
        case["cwd"].mkdir(exist_ok=True)
        gen = Path(case["argv"][0]).parent / "generate_sine_wave.py"
        subprocess.run([PY, str(gen)], cwd=case["cwd"], check=True, timeout=TIMEOUT_S)


def _mask(text: str, case: dict[str, Any]) -> str:
    """Times the script prints of itself differ from run to run: mask numbers after 'time'.

    An unseeded script prints other numbers each run: there only the lines' words compare.
    """
    if case.get("unseeded"):
        return re.sub(r"[-+]?\d[\d.e+-]*", "<n>", text)
    for pattern, replacement in case.get("masks", ()):  # the case's own timing lines
        text = re.sub(pattern, replacement, text)
    text = re.sub(r"(time:?\s*)[\d.]+\s*s", r"\1<t>s", text)
    text = re.sub(r"((?:Time|Data)\s+)[\d.]+ \(\s*[\d.]+\)", r"\1<t>", text)  # imagenet
    return re.sub(r"(ms/batch\s*)[\d.]+", r"\1<t>", text)


def _run(case: dict[str, Any], *, agent_dir: Path | None) -> dict[str, Any]:
    cmd = [PY, *case["argv"]]
    if agent_dir is not None:
        cmd = [PERF_AGENT, "attach", "--offline", str(agent_dir), "--", *cmd]
    # time_sequence_prediction saves numpy arrays with torch.save, which torch >= 2.6 loads
    # only with weights_only off: set for both arms alike, the script stays unchanged.
    path = os.pathsep.join([*case.get("pythonpath", ()), str(ROOT)])  # a repo's own package
    env = dict(os.environ, PYTHONPATH=path, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    start = time.perf_counter()
    # SIGINT at its default (a shell's background job starts with it ignored), as a
    # terminal's user has it; both arms alike.
    proc = subprocess.Popen(
        cmd,
        cwd=case["cwd"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    after = case.get("interrupt_after_s")
    try:
        if after is not None:
            try:
                out, err = proc.communicate(timeout=after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)  # to the command only: perf-agent forwards it
                out, err = proc.communicate(timeout=TIMEOUT_S)
        else:
            out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    # a shell's exit status: killed by signal N (the bare run's Ctrl-C) is 128 + N
    rc = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
    return {"rc": rc, "wall_s": wall, "stdout": out, "stderr": err}


def analyze(agent_dir: Path) -> tuple[dict[str, Any], str]:
    """`python -m perfweb_recommender analyze` of one offline folder: its JSON report (or
    `{"error", "rc"}`) and its text, stderr included."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [PY, "-m", "perfweb_recommender", "analyze", str(agent_dir)]
    text = subprocess.run(args, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    js = subprocess.run(
        [*args, "--format", "json"], capture_output=True, text=True, env=env, timeout=TIMEOUT_S
    )
    try:
        report = json.loads(js.stdout)
    except ValueError:
        report = {"error": (js.stderr or js.stdout)[-2000:], "rc": js.returncode}
    return report, text.stdout + text.stderr


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    run = report.get("run") or {}
    cov = report.get("coverage") or {}
    findings = report.get("findings") or []
    return {
        "kind": run.get("kind"),
        "steps_source": run.get("steps_source"),
        "counted": run.get("requests") if run.get("kind") == "inference" else run.get("steps"),
        "served": (run.get("served") or {}).get("requests", 0),  # after the last step
        "ranks": run.get("ranks"),
        "traces": cov.get("traces"),
        "verdict": cov.get("verdict"),
        "statement": cov.get("statement") or "",
        "top_findings": [f.get("id") or f.get("diagnosis_id") for f in findings[:3]],
    }


def _actual_count(case: dict[str, Any], stdout: str) -> int | None:
    if "count_lines" in case:  # one line the script prints per step it ran
        return len(re.findall(case["count_lines"], stdout, re.M))
    if case["name"] == "regression":
        match = re.search(r"after (\d+) batches", stdout)
        return int(match.group(1)) if match else None
    if case["name"].startswith("imagenet"):  # `-p 1`: a line after each optimizer step
        done = re.findall(r"^Epoch: \[0\]\[\s*(\d+)/", stdout, re.M)
        return int(done[-1]) if done else 0
    return case["expect"]["count"]


def _same_stdout(a: str, b: str, case: dict[str, Any]) -> bool:
    """Byte-identical once masked; a run stopped by SIGINT: the lines both printed."""
    a, b = _mask(a, case), _mask(b, case)
    if case.get("interrupt_after_s") is None:
        return a == b
    la, lb = a.splitlines(), b.splitlines()
    n = min(len(la), len(lb))
    return n > 0 and la[:n] == lb[:n]


def bench(examples: Path, *, runs: int, only: set[str] | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="public-scripts-") as tmp:
        work = Path(tmp)
        tree = _export(examples, work)
        _corpus(work / "corpus")
        results = []
        for case in _cases(tree, work):
            if only and not any(o in case["name"] for o in only):
                continue
            if case.get("slow") and not only:
                results.append(
                    {
                        "name": case["name"],
                        "what": case["what"],
                        "status": "not run",
                        "why": "minutes per LBFGS step on this CPU: `--only time_seq`",
                    }
                )
                continue
            results.append(_bench_case(case, work, runs=runs))
            print(
                json.dumps({k: v for k, v in results[-1].items() if k != "report_text"}), flush=True
            )
    return {
        "date": datetime.date.today().isoformat(),
        "examples_commit": _commit(examples),
        "runs": runs,
        "load": os.getloadavg(),
        "cpus": os.cpu_count(),
        "torch": _version("torch"),
        "torchvision": _version("torchvision"),
        "scripts": results,
    }


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - a missing or broken package is reported, not raised
        return None


def _bench_case(case: dict[str, Any], work: Path, *, runs: int) -> dict[str, Any]:
    row: dict[str, Any] = {"name": case["name"], "what": case["what"], "argv": case["argv"]}
    missing = [
        m for m in case["needs"] if importlib.util.find_spec(m) is None or _version(m) is None
    ]
    if missing:
        return {**row, "status": "not run", "why": f"{', '.join(missing)} not importable here"}
    needs_file = case.get("needs_file")
    if needs_file and not needs_file.exists():
        return {
            **row,
            "status": "not run",
            "why": f"needs {needs_file.name}, which the "
            "word_language_model (train) case writes: `--only word_language_model`",
        }
    _prepare(case, work)
    bare, attached, last_dir = [], [], None
    for i in range(runs):
        bare.append(_run(case, agent_dir=None))
        last_dir = work / f"agent-{abs(hash(case['name']))}-{i}"
        shutil.rmtree(last_dir, ignore_errors=True)
        attached.append(_run(case, agent_dir=last_dir))
    b, a = bare[-1], attached[-1]
    report, text = analyze(last_dir) if last_dir else ({}, "")
    summary = _summary(report)
    if case.get("skips") and case["skips"] in b["stdout"]:
        # The script did no torch work: what matters is that the agent did not call it healthy.
        return {
            **row,
            "status": "not run",
            "why": "the script exits without 2 GPUs: "
            f"{b['stdout'].strip().splitlines()[0][:100]} Agent coverage: {summary['verdict']}",
            "rc_bare": b["rc"],
            "rc_attached": a["rc"],
            **summary,
        }
    if b["rc"] != case["expect"].get("rc", 0):
        return {
            **row,
            "status": "not run",
            "why": f"the bare run fails here (exit {b['rc']}: "
            f"{b['stderr'].strip().splitlines()[-1][:160]})",
            "rc_bare": b["rc"],
            "rc_attached": a["rc"],
            **summary,
        }
    actual = _actual_count(case, a["stdout"])
    bare_s = [r["wall_s"] for r in bare]
    att_s = [r["wall_s"] for r in attached]
    return {
        **row,
        "status": "run",
        "rc_bare": b["rc"],
        "rc_attached": a["rc"],
        "stdout_identical": all(_same_stdout(x["stdout"], b["stdout"], case) for x in attached),
        "expected": {**case["expect"], "count": actual},
        **summary,
        "count_right": actual is None or summary["counted"] == actual,
        "served_right": summary["served"] == case["expect"].get("served", summary["served"]),
        "wall_bare_s": _stats(bare_s),
        "wall_attached_s": _stats(att_s),
        "overhead": statistics.median(att_s) / statistics.median(bare_s),
        "stderr_tail_attached": a["stderr"][-600:],
        "report_text": text,
    }


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def markdown(result: dict[str, Any]) -> str:
    header = (
        f"pytorch/examples `{result['examples_commit'][:12]}`, {result['date']}, torch "
        f"{result['torch']}"
        + (f", torchvision {result['torchvision']}" if result.get("torchvision") else "")
        + f", {result['cpus']} CPUs, load {result['load'][0]:.1f}, "
        f"{result['runs']} runs each (median, min-max)."
    )
    return header + "\n\n" + table(result["scripts"])


def table(scripts: list[dict[str, Any]]) -> str:
    """The Markdown table of the scripts' rows."""
    lines = [
        "| script | exit bare/attached | stdout same | counted / ran | source | kind | ranks "
        "| traces | coverage | top finding | wall bare s | wall attached s | overhead |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in scripts:
        if s["status"] != "run":
            lines.append(f"| {s['name']} | not run: {s['why']} |" + " |" * 11)
            continue
        wb, wa = s["wall_bare_s"], s["wall_attached_s"]
        ran = s["expected"]["count"]
        top = s["top_findings"][0] if s["top_findings"] else "none"
        served = s["expected"].get("served")  # requests served after training, where expected
        also = "" if served is None else f"; served {s.get('served')} / {served}"
        lines.append(
            f"| {s['name']} | {s['rc_bare']}/{s['rc_attached']} | "
            f"{'yes' if s['stdout_identical'] else 'NO'} | {s['counted']} / "
            f"{ran if ran is not None else '?'}{also} | {s['steps_source']} | {s['kind']} | "
            f"{s['ranks']} | {s['traces']} | {s['verdict']} | {top} | "
            f"{wb['median']:.2f} ({wb['min']:.2f}-{wb['max']:.2f}) | "
            f"{wa['median']:.2f} ({wa['min']:.2f}-{wa['max']:.2f}) | {s['overhead']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", type=Path, help="pytorch/examples work tree or bare git dir")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated parts of script names")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/public_scripts.json")
    args = parser.parse_args()
    only = {o for o in args.only.split(",") if o} or None
    write(bench(args.examples, runs=args.runs, only=only), args.out)


def write(
    result: dict[str, Any], out: Path, describe: Callable[[dict[str, Any]], str] | None = None
) -> None:
    """The results as JSON at `out`, and their Markdown table (`describe`, this bench's
    `markdown` by default) beside it (`.md`) and here."""
    out.write_text(json.dumps(result, indent=2) + "\n")
    table = (describe or markdown)(result)
    out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
