"""The run page's trace tables say what their window spanned in the run's own unit, and leave
out device-time columns a CPU trace cannot fill."""

from __future__ import annotations

from perfweb.diagnostics import trace_panel
from perfweb_contract.protocol import WindowName

CPU_OPERATORS = [
    {"name": "aten::linear", "calls": 5, "host_self_us": 900.0, "host_total_us": 1500.0,
     "device_self_us": 0.0, "device_total_us": 0.0},
]  # fmt: skip
CPU_STEPS = [
    {"duration_us": 1000.0, "cpu_exec_us": 800.0, "other_us": 200.0},
    {"duration_us": 1000.0, "cpu_exec_us": 700.0, "other_us": 300.0},
    {"duration_us": 1000.0, "cpu_exec_us": 600.0, "other_us": 400.0},
]


def _view(kind: str | None, *, steps: int = 0) -> dict:
    tables = {"steps": steps, "operators": CPU_OPERATORS, "kernels": []}
    return trace_panel._tables_view(
        tables, {"steps": CPU_STEPS}, window=WindowName(0, 10, 15), kind=kind
    )


def test_an_inference_window_counts_the_requests_its_name_says_it_spanned() -> None:
    assert _view("inference")["window_text"] == "over the window of 5 requests"


def test_a_training_window_counts_its_profiler_steps() -> None:
    assert _view("training", steps=3)["window_text"] == "over the window of 3 steps"


def test_a_cpu_trace_shows_no_device_columns_nor_device_rows_of_zeros() -> None:
    view = _view("training", steps=3)
    assert view["device_columns"] is False
    labels = [row["label"] for row in view["breakdown"]]
    assert labels == ["DataLoader", "CPU execution", "Other", "Step"]
