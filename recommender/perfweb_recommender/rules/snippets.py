"""Fix snippets written for the run as the agent saw it: the framework that builds the
DataLoaders (a Hugging Face `Trainer` takes them from `TrainingArguments`, Lightning from the
datamodule, a plain loop from its own `DataLoader(...)` call), the installed torch's current
API, and the host's own cores and command.

Every rule that shows DataLoader settings, the quantisation call or a core pinning takes its
snippet from here, so that a Trainer user is never handed a raw `DataLoader(...)` and no
snippet calls an API the installed torch deprecates.
"""

from __future__ import annotations

import shlex

from perfweb_contract.cpulist import format_cpu_list, parse_cpu_list
from perfweb_recommender.evidence import RunEvidence

TRANSFORMERS, LIGHTNING = "transformers", "lightning"  # fact `framework.trainer`
# The DataLoader keywords and TrainingArguments' names for them.
HF_ARGUMENTS = {
    "num_workers": "dataloader_num_workers",
    "persistent_workers": "dataloader_persistent_workers",
    "pin_memory": "dataloader_pin_memory",
    "prefetch_factor": "dataloader_prefetch_factor",
}
# torch.ao.quantization is deprecated from this torch on (its eager-mode `quantize_dynamic`
# warns and points at torchao's `quantize_`).
AO_QUANTIZATION_DEPRECATED = (2, 9)


def framework(evidence: RunEvidence) -> str | None:
    """ "transformers", "lightning" or None (a plain PyTorch loop)."""
    value = evidence.fact("framework.trainer")
    return value if value in (TRANSFORMERS, LIGHTNING) else None


def dataloader_snippet(evidence: RunEvidence, settings: dict[str, object]) -> str:
    """Where the user sets `settings` (DataLoader keywords: num_workers=2, ...), in their
    framework's own terms."""
    kind = framework(evidence)
    if kind == TRANSFORMERS:
        arguments = ", ".join(f"{HF_ARGUMENTS.get(k, k)}={v!r}" for k, v in settings.items())
        return f"TrainingArguments(..., {arguments})"
    keywords = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    if kind == LIGHTNING:
        return (
            "# in your LightningDataModule (or LightningModule)\n"
            "def train_dataloader(self):\n"
            f"    return DataLoader(self.train_set, batch_size=..., {keywords})"
        )
    return f"DataLoader(dataset, batch_size=..., {keywords})"


def torch_version(evidence: RunEvidence) -> tuple[int, int] | None:
    """(major, minor) of the run's torch, None when unknown."""
    text = str(evidence.fact("torch.version", ""))
    parts = text.split("+")[0].split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def dynamic_quantization_snippet(evidence: RunEvidence) -> str:
    """int8 dynamic quantisation of nn.Linear with the API the installed torch recommends."""
    version = torch_version(evidence)
    if version is not None and version < AO_QUANTIZATION_DEPRECATED:
        return (
            "model = torch.ao.quantization.quantize_dynamic(\n"
            "    model, {torch.nn.Linear}, dtype=torch.qint8\n)"
        )
    return (
        "# pip install torchao  (torch.ao.quantization is deprecated in this torch)\n"
        "from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_\n"
        "quantize_(model, Int8DynamicActivationInt8WeightConfig())"
    )


def command_text(evidence: RunEvidence) -> str:
    """The run's command as a shell line ("python train.py" when it is not known)."""
    return shlex.join(evidence.command) if evidence.command else "python train.py"


def pinning_snippet(evidence: RunEvidence, *, cores_wanted: int) -> str:
    """`taskset` lines that give the job `cores_wanted` of the cores it may use (the fact
    `host.affinity`, else 0..cores-1) and the other work the rest, by number."""
    allowed = parse_cpu_list(str(evidence.fact("host.affinity", "")))
    if not allowed:
        count = evidence.fact("host.usable_cores", evidence.fact("host.cpu_count"))
        allowed = list(range(int(count))) if isinstance(count, int) and count > 0 else []
    if not allowed:
        return f"taskset -c <cores> {command_text(evidence)}"
    wanted = max(1, min(cores_wanted, len(allowed)))
    job, rest = allowed[:wanted], allowed[wanted:]
    line = f"taskset -c {format_cpu_list(job)} {command_text(evidence)}"
    if rest:
        return f"{line}\ntaskset -cp {format_cpu_list(rest)} <pid of the other work>"
    return (
        f"{line}\n# cores {format_cpu_list(allowed)} are all the job may use: move the other "
        "work to another host"
    )
