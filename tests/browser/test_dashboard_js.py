"""The dashboard's pure JavaScript helpers, run in Chromium against their Python twins."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfweb.dashboard.templatetags.perfweb_format import duration
from perfweb.dashboard.timeline_rows import (
    SCALAR_ROWS_MAX,
    timeline_extras_config,
    timeline_rows_config,
)

pytestmark = pytest.mark.browser

JS = Path(__file__).resolve().parents[2] / "perfweb" / "dashboard" / "static" / "dashboard" / "js"


@pytest.fixture(scope="module")
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page()
    page.set_content("<!doctype html><title>js</title>")
    for name in ("format.js", "api.js", "timeline.js"):
        page.add_script_tag(path=str(JS / name))
    yield page
    page.close()


@pytest.mark.parametrize("seconds", [0, 0.4, 12.7, 59, 60, 125, 3599, 3725, 86399, 90000, 10**6])
def test_it_formats_durations_as_the_server_does(page: Any, seconds: float) -> None:
    assert page.evaluate("(s) => PerfwebFormat.duration(s)", seconds) == duration(seconds)


@pytest.mark.parametrize(
    "command",
    [["python", "train.py", "--lr", "3e-4"], ["python", "-c", "print('hi there')"], ["a b", ""]],
)
def test_it_writes_a_command_as_shlex_join_does(page: Any, command: list[str]) -> None:
    assert page.evaluate("(c) => PerfwebFormat.commandLine(c)", command) == shlex.join(command)


def test_it_splices_the_zoomed_detail_into_the_overview(page: Any) -> None:
    overview = [
        {"device": "gpu:0", "name": "gpu.utilization", "t": [0, 10, 20, 30], "v": [1, 2, 3, 4]}
    ]
    detail = {
        "start": 5,
        "end": 25,
        "series": [{"device": "gpu:0", "name": "gpu.utilization", "t": [6, 8, 12], "v": [7, 8, 9]}],
    }
    merged = page.evaluate("([o, d]) => PerfwebTimeline.splice(o, d)", [overview, detail])
    assert merged[0]["t"] == [0, 6, 8, 12, 30]
    assert merged[0]["v"] == [1, 7, 8, 9, 4]


def test_it_says_once_that_the_gpu_rows_are_empty(page: Any) -> None:
    rows = [
        {
            "key": "gpu_util",
            "title": "GPU utilisation",
            "group": "gpu",
            "empty": "no GPU.",
            "pending": "soon.",
        },
        {
            "key": "gpu_power",
            "title": "GPU power",
            "group": "gpu",
            "empty": "no GPU.",
            "pending": "soon.",
        },
        {
            "key": "cpu",
            "title": "Process CPU",
            "group": "process",
            "empty": "none.",
            "pending": "soon.",
        },
    ]
    lines = page.evaluate("([r]) => PerfwebTimeline.emptyLines(r, new Set(['cpu']), 0)", [rows])
    assert lines == [{"group": "gpu", "text": "GPU utilisation and GPU power: no GPU."}]
    waiting = page.evaluate("([r]) => PerfwebTimeline.emptyLines(r, new Set(['cpu']), 2)", [rows])
    assert waiting[0]["text"] == "GPU utilisation and GPU power: soon."


def test_it_maps_axis_values_back_to_unix_seconds(page: Any) -> None:
    seconds = 1764496800.25
    back = page.evaluate(
        """(s) => {
          const x = PerfwebTimeline.toAxis(s);
          const asText = new Date(x).toISOString().replace('T', ' ').replace('Z', '');
          return [PerfwebTimeline.fromAxis(x), PerfwebTimeline.fromAxis(asText)];
        }""",
        seconds,
    )
    assert back == [pytest.approx(seconds, abs=1e-3), pytest.approx(seconds, abs=1e-3)]


@pytest.mark.parametrize(
    ("device", "label"),
    [
        ("process", "main process"),
        ("workers", "DataLoader workers"),
        ("process:3", "rank 3 process"),
        ("workers:3", "rank 3 workers"),
        ("gpu:2", "GPU 2"),
        ("gpu:2:n1", "GPU 2 (node 1)"),
        ("rank:4", "rank 4"),
        ("host", "host"),
    ],
)
def test_it_labels_every_device_name_the_agent_uses(page: Any, device: str, label: str) -> None:
    assert page.evaluate("(d) => PerfwebTimeline.deviceLabel(d)", device) == label


def test_it_draws_the_first_scalars_by_name_and_names_the_rest(page: Any) -> None:
    extras = timeline_extras_config()
    names = ["zeta", *(f"m{i:02d}" for i in range(SCALAR_ROWS_MAX)), "alpha"]
    series = [{"device": "rank:0", "name": f"scalar.{n}", "t": [1.0], "v": [2.0]} for n in names]
    series += [
        {"device": "rank:0", "name": "scalar.empty", "t": [], "v": []},
        {"device": "gpu:0", "name": "gpu.utilization", "t": [1.0], "v": [3.0]},
        {"device": "rank:1", "name": "scalar.alpha", "t": [1.0], "v": [2.0]},
    ]
    got = page.evaluate("([s, e]) => PerfwebTimeline.scalarRows(s, e)", [series, extras])
    assert [row["title"] for row in got["rows"]] == sorted(names)[:SCALAR_ROWS_MAX]
    assert got["rows"][0] == {
        "key": "scalar:scalar.alpha",
        "title": "alpha",
        "unit": "",
        "metrics": ["scalar.alpha"],
        "group": "scalars",
        "empty": "",
        "scalar": True,
    }
    assert got["hidden"] == ["m15", "zeta"]


def test_it_turns_phase_changes_into_bands_up_to_the_end_of_the_data(page: Any) -> None:
    extras = timeline_extras_config()
    series = [
        {"device": "rank:1", "name": "run.phase", "t": [0.0], "v": [4.0]},  # a later rank
        {
            "device": "rank:0",
            "name": "run.phase",
            "t": [30.0, 10.0, 20.0, 25.0, 35.0],
            "v": [1.0, 1.0, 2.0, 0.0, 1.0],
        },  # unsorted; 35: the same phase again, one band
        {"device": "process", "name": "process.rss", "t": [0.0, 40.0], "v": [1.0, 1.0]},
    ]
    bands = page.evaluate("([s, e]) => PerfwebTimeline.phaseBands(s, e)", [series, extras])
    assert bands == [
        {"phase": "train", "start": 10.0, "end": 20.0},
        {"phase": "eval", "start": 20.0, "end": 25.0},
        {"phase": "train", "start": 30.0, "end": 40.0},
    ]


def _legend(traces: list[dict[str, Any]]) -> list[str]:
    """The names a Plotly legend lists: drawn traces not kept out of it."""
    return [
        t["name"]
        for t in traces
        if t.get("visible", True) and t.get("showlegend", True) is not False
    ]


def test_the_step_rows_legend_names_only_what_is_drawn_zoomed_out_and_in(page: Any) -> None:
    (row,) = [row for row in timeline_rows_config() if row["key"] == "steps"]
    times = [float(t) for t in range(40)]
    series = [
        {"device": "rank:0", "name": "step.duration", "t": times, "v": [0.05, 0.8] * 20},
        {"device": "rank:0", "name": "step.data_wait", "t": times, "v": [0.01] * 40},
    ]
    bands = [
        {
            "device": "rank:0",
            "t": times[9:],
            "p10": [0.05] * 31,
            "median": [0.4] * 31,
            "p90": [0.8] * 31,
            "window_steps": 10,
            "raw_count": 40,
        }
    ]
    draw = "([r, s, ctx]) => PerfwebTimeline.rowTraces(r, s, 0, ctx).traces"
    out = page.evaluate(draw, [row, series, {"bands": bands, "zoomed": False}])
    assert _legend(out) == ["p10–p90", "step time, rolling median of 10 steps", "data wait"]
    (each,) = [t for t in out if t["name"] == "each step"]
    assert each["visible"] is False  # the zig-zag of raw steps is not drawn zoomed out
    inside = page.evaluate(draw, [row, series, {"bands": bands, "zoomed": True}])
    assert _legend(inside) == [
        "p10–p90",
        "step time, rolling median of 10 steps",
        "each step",
        "data wait",
    ]
    bare = page.evaluate(draw, [row, series, {"bands": [], "zoomed": False}])
    assert _legend(bare) == ["step time", "data wait"]  # no bands yet: the raw steps alone
