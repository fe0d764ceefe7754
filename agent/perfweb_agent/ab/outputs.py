"""The output probe of an A/B round: the model's outputs on the first requests, for agreement.

Installed only when `PERF_AGENT_AB_OUTPUTS_FILE` is set. The model is the first outermost
module called that has parameters or submodules (a quantised model keeps its weights packed,
out of `parameters()`). Its outputs (the first tensor it returns) are kept for the first
`MAX_REQUESTS` calls, at most `MAX_VALUES` numbers each and `MAX_TOTAL_VALUES` in all (about
1.3 MB of JSON at most), and written as JSON at exit by the process that installed the
probe; then its class's `__call__` is put back. Both arms of a round see the same inputs (the
engine seeds them alike, agent/perfweb_agent/ab/seed.py), so `summary` can pair the requests in
order.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
from typing import Any

ENV_OUTPUTS_FILE = "PERF_AGENT_AB_OUTPUTS_FILE"
MAX_REQUESTS = 64
MAX_VALUES = 4096  # numbers kept per request: bounded memory whatever the model returns
MAX_TOTAL_VALUES = 65_536  # numbers kept over all requests: a bounded file
# A baseline output this close to zero everywhere has no scale to be relative to.
_TINY = 1e-12

_outputs: list[dict[str, Any]] = []
_state = {"values": 0, "calls": 0, "untensored": 0}


def install_from_env() -> bool:
    """Install the probe if `PERF_AGENT_AB_OUTPUTS_FILE` is set; True when installed."""
    path = os.environ.get(ENV_OUTPUTS_FILE, "")
    if not path or os.environ.get("RANK", "0") != "0":
        return False
    atexit.register(_write, path, os.getpid())
    from perfweb_agent.ab.knobs_torch import after_torch_import

    after_torch_import(_find_model)
    return True


def record(output: Any, tensor: type, limit: int = MAX_VALUES) -> dict[str, Any] | None:
    """One request's output as JSON-able numbers: shape, top-1 per row, the first `limit`
    values (None when the output holds no tensor)."""
    if not isinstance(output, tensor):
        items = output.values() if isinstance(output, dict) else output
        if not isinstance(items, (list, tuple)) and not isinstance(output, dict):
            return None
        output = next((item for item in items if isinstance(item, tensor)), None)
        if output is None:
            return None
    values = output.detach()
    entry: dict[str, Any] = {"shape": list(values.shape)}
    if values.dim() == 2:  # classification-shaped: rows of scores
        entry["top1"] = values[:limit].argmax(-1).tolist()
    # Only the leading rows that hold the first `limit` numbers are copied and converted:
    # a model's whole output (an LLM's logits) may be far larger than what is kept.
    if values.dim() > 1 and values.shape[0] > 1 and values.numel():
        per_row = max(1, values.numel() // values.shape[0])
        values = values[: -(-limit // per_row)]
    entry["values"] = values.reshape(-1)[:limit].float().tolist()
    return entry


def _find_model(torch: Any) -> None:
    module_cls = torch.nn.Module
    original_call = module_cls.__call__
    local = threading.local()
    found: list[bool] = []

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth: int = getattr(local, "depth", 0)
        if found or depth:
            return original_call(self, *args, **kwargs)
        if next(self.parameters(), None) is None and next(self.children(), None) is None:
            local.depth = 1  # a parameter-free outer call (a loss): look inside it
            try:
                return original_call(self, *args, **kwargs)
            finally:
                local.depth = 0
        found.append(True)
        if module_cls.__call__ is __call__:
            module_cls.__call__ = original_call
        _watch(torch, self)
        return type(self).__call__(self, *args, **kwargs)

    module_cls.__call__ = __call__


def _watch(torch: Any, model: Any) -> None:
    cls = type(model)
    own = cls.__dict__.get("__call__")
    original = cls.__call__
    tensor = torch.Tensor

    def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(module, *args, **kwargs)
        if module is model and not _full():
            _state["calls"] += 1
            try:
                limit = min(MAX_VALUES, MAX_TOTAL_VALUES - _state["values"])
                entry = record(result, tensor, limit)
                if entry is None:
                    _state["untensored"] += 1
                else:
                    _outputs.append(entry)
                    _state["values"] += len(entry["values"])
            except Exception:  # noqa: BLE001 - a probe never changes the script's behaviour
                pass
            if _full():  # enough: the class runs unwrapped again
                if own is None:
                    del cls.__call__
                else:
                    cls.__call__ = own
        return result

    cls.__call__ = __call__


def _full() -> bool:
    # calls, not kept outputs: a model that returns no tensor is unwrapped after as many
    return _state["calls"] >= MAX_REQUESTS or _state["values"] >= MAX_TOTAL_VALUES


def _note() -> str:
    if _outputs:
        return ""
    if _state["untensored"]:
        return "outputs not captured: the model returned no tensor"
    return "outputs not captured: no module call seen"


def _write(path: str, owner: int) -> None:
    if os.getpid() != owner:
        return
    for entry in _outputs:
        entry["values"] = [v if math.isfinite(v) else None for v in entry["values"]]
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"requests": _outputs, "note": _note()}, handle)
    except OSError:
        pass


# Why an arm's file holds no outputs when the probe did not say.
NOT_WRITTEN = "outputs not captured: the arm wrote no output record"


def read_capture(path: str) -> tuple[list[dict[str, Any]], str]:
    """The outputs an arm recorded, and why there are none ("" when there are some)."""
    try:
        with open(path, encoding="utf-8") as handle:
            body = json.load(handle)
    except (OSError, ValueError):
        return [], NOT_WRITTEN
    entries = body.get("requests") if isinstance(body, dict) else body
    if not isinstance(entries, list):
        return [], NOT_WRITTEN
    kept = [e for e in entries if isinstance(e, dict) and isinstance(e.get("values"), list)]
    note = body.get("note") if isinstance(body, dict) else ""
    return kept, "" if kept else str(note or "outputs not captured: no module call seen")


def read_outputs(path: str) -> list[dict[str, Any]]:
    """The outputs a round recorded (empty when the probe saw none or wrote nothing)."""
    return read_capture(path)[0]


def summary(
    baseline: list[dict[str, Any]], candidate: list[dict[str, Any]], *, note: str = ""
) -> dict[str, Any]:
    """The candidate's output agreement with the baseline of the same round, for the arm event.

    Requests pair in order. Keys: `samples` (pairs compared), `top1_agreement` (share of
    rows of classification-shaped outputs with the same arg-max; None when none are),
    `max_abs_diff`, `mean_abs_diff`, `max_rel_diff` (a request's largest difference over the
    largest magnitude of its baseline output; the largest of all requests) and `mismatched`
    (requests whose shape differs, or where one arm's value is not finite and the other's
    is). No pair gives `samples` 0 and `note` (why).
    `perfweb_contract.ab.results.output_agreement` judges it.
    """
    pairs = list(zip(baseline, candidate, strict=False))
    if not pairs:
        return {"samples": 0, "note": note or "outputs not captured: no module call seen"}
    same = rows = values = mismatched = 0
    max_abs = total_abs = max_rel = 0.0
    for before, after in pairs:
        if before.get("shape") != after.get("shape"):
            mismatched += 1
            continue
        for a, b in zip(before.get("top1", []), after.get("top1", []), strict=False):
            rows += 1
            same += int(a == b)
        request_abs = scale = 0.0
        finiteness_differs = False
        for a, b in zip(before["values"], after["values"], strict=False):
            if a is None or b is None:
                finiteness_differs = finiteness_differs or (a is None) != (b is None)
                continue
            diff = abs(float(a) - float(b))
            request_abs, total_abs, values = max(request_abs, diff), total_abs + diff, values + 1
            scale = max(scale, abs(float(a)))
        mismatched += int(finiteness_differs)
        max_abs = max(max_abs, request_abs)
        max_rel = max(max_rel, request_abs / max(scale, _TINY) if request_abs else 0.0)
    return {
        "samples": len(pairs),
        "top1_agreement": same / rows if rows else None,
        "max_abs_diff": max_abs,
        "mean_abs_diff": total_abs / values if values else 0.0,
        "max_rel_diff": max_rel,
        "mismatched": mismatched,
    }
