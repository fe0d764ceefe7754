"""In-process A/B for bench/agent_overhead.py: agent on/off in alternating blocks of steps.

On a shared, loaded machine, run-to-run noise (tens of %) hides a sub-percent cost. Here one
process alternates blocks of steps with the agent fully on (its optimizer hooks and every
torch function or method it wrapped installed: the DataLoader's, the module calls', the
backward's, `Tensor.to`'s, `zero_grad`'s: the step anatomy's marks included; its thread
sampling at the given rate) and off (hooks removed, the bare functions back, sampling
paused), so that whatever the neighbours do hits both arms alike. Which attributes were
toggled is in the result (`toggled`): each one the agent had replaced after the warm-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

BLOCKS = textwrap.dedent(
    """
    import json, os, statistics, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data import dataloader as dl
    import torch.optim.optimizer as optim_mod

    interval, blocks, per_block = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    offline = sys.argv[4]
    MISSING = object()
    model_types = (nn.Sequential, nn.Linear, nn.ReLU)

    def patchable():  # (owner, name) of what the agent may wrap on this loop's path
        tensor, optimizer = torch.Tensor, torch.optim.Optimizer
        spots = [(dl._BaseDataLoaderIter, "__next__"), (dl._BaseDataLoaderIter, "__init__"),
                 (torch.autograd, "backward"), (tensor, "backward"), (tensor, "to"),
                 (tensor, "cuda"), (tensor, "cpu"), (optimizer, "zero_grad"),
                 (nn.Module, "zero_grad"), (nn.Module, "__call__")]
        return spots + [(cls, "__call__") for cls in model_types]

    def own(owner, name):
        return vars(owner).get(name, MISSING)

    bare = {spot: own(*spot) for spot in patchable()}
    import perfweb_agent
    a = perfweb_agent.attach(offline=offline, interval=interval, profile=False)
    hook, pre = a.patches._handles[0], a.patches._handles[1]
    post_hook = optim_mod._global_optimizer_post_hooks[hook.id]
    pre_hook = optim_mod._global_optimizer_pre_hooks[pre.id]  # the step anatomy's
    wrapped = {}  # filled after the warm-up: the module wrappers are installed on first call

    def agent_on(on):
        for (owner, name), value in wrapped.items():
            chosen = value if on else bare[(owner, name)]
            if chosen is MISSING:
                if name in vars(owner):
                    delattr(owner, name)
            else:
                setattr(owner, name, chosen)
        if on:
            optim_mod._global_optimizer_post_hooks[hook.id] = post_hook
            optim_mod._global_optimizer_pre_hooks[pre.id] = pre_hook
        else:
            optim_mod._global_optimizer_post_hooks.pop(hook.id, None)
            optim_mod._global_optimizer_pre_hooks.pop(pre.id, None)
        a.collecting = on  # the thread still wakes, but samples nothing while off

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256 * 64, 256), torch.randn(256 * 64, 1))
    loader = DataLoader(data, batch_size=256, shuffle=True, num_workers=0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    it = iter(loader)

    def step():
        global it
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        return time.perf_counter() - t0

    def agent_cpu_s():
        total = 0
        for thread in a.sender.threads:  # the sampler and the network thread
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    for _ in range(100):  # warm-up: allocator, optimizer state, caches
        step()
    for spot in patchable():
        if own(*spot) is not bare[spot]:
            wrapped[spot] = own(*spot)
    agent_on(True)
    cpu0, wall0 = agent_cpu_s(), time.perf_counter()
    for _ in range(200):
        step()
    agent_cpu_share = (agent_cpu_s() - cpu0) / (time.perf_counter() - wall0)
    times = {True: [], False: []}
    for b in range(blocks):
        on = (b % 4) in (0, 3)  # ABBA order: drift within a pair cancels
        agent_on(on)
        times[on] += [step() for _ in range(per_block)]
    agent_on(True)
    out = {"agent_thread_cpu_pct_of_a_core": round(100 * agent_cpu_share, 3),
           "toggled": sorted(f"{owner.__name__}.{name}" for owner, name in wrapped)}
    for on, values in times.items():
        out["on" if on else "off"] = {"median_ms": statistics.median(values) * 1e3,
                                       "mean_ms": statistics.fmean(values) * 1e3,
                                       "steps": len(values)}
    print(json.dumps(out))
    """
)


def run_blocks(
    tmp: str, root: Path, interval: float, blocks: int = 80, per_block: int = 10
) -> dict:
    """One process, agent on/off in ABBA blocks; median and mean step time per arm."""
    script = Path(tmp) / "blocks.py"
    script.write_text(BLOCKS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            str(interval),
            str(blocks),
            str(per_block),
            os.path.join(tmp, f"blocks-{interval}"),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for stat in ("median_ms", "mean_ms"):
        result[f"slowdown_pct_{stat[:-3]}"] = round(
            100 * (result["on"][stat] / result["off"][stat] - 1), 3
        )
    return result
