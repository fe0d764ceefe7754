"""Reports say what they could not read: an unsupported format by name, the evidence a
GPU-only trace lacks, which span a GPU share uses, and counts in the right number."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfweb_recommender.api import analyze_path
from perfweb_recommender.errors import InputError
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, counted, times
from perfweb_recommender.text_report import render_text
from tests.recommender.conftest import PEER


def test_it_names_a_jax_xplane_protobuf_as_unsupported(tmp_path: Path) -> None:
    xplane = tmp_path / "host.xplane.pb"
    xplane.write_bytes(b"\x0a\x8f\x01\x12\x0f/host:CPU\xff\xfe\x00")
    with pytest.raises(InputError) as raised:
        analyze_path(xplane)
    message = str(raised.value)
    assert "format not supported" in message and "xplane" in message
    assert "UTF-8" not in message


def test_a_directory_of_xplane_files_says_so(tmp_path: Path) -> None:
    (tmp_path / "plugins.xplane.pb").write_bytes(b"\x0a\x01")
    with pytest.raises(InputError, match="format not supported"):
        from perfweb_recommender.trace.loader import load_traces

        load_traces(tmp_path)


@pytest.mark.skipif(PEER is None, reason="shared/peer-traces not available")
def test_a_gpu_only_trace_says_which_evidence_is_missing() -> None:
    assert PEER is not None
    report = analyze_path(PEER / "tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz")
    assert any("GPU events only" in item for item in report.missing)
    text = render_text(report)
    assert "Not judged, evidence missing:" in text and "DataLoader waits" in text
    assert "first-to-last kernel span" in text


def test_no_findings_lists_the_missing_evidence_instead_of_an_all_clear() -> None:
    from perfweb_recommender.api import analyze_evidence

    text = render_text(analyze_evidence(RunEvidence()))
    assert "nothing in the evidence points at a known bottleneck" not in text
    assert "no profiler trace" in text and "no agent facts" in text


def test_counts_read_in_the_right_number() -> None:
    assert times(1) == "1 time" and times(3) == "3 times"
    assert counted(1, "core") == "1 core" and counted(2, "process", "processes") == "2 processes"
    assert Evidence("DataLoader workers", 1, "processes", "facts").as_json()["unit"] == "process"
    assert Evidence("DataLoader workers", 4, "processes", "facts").as_json()["unit"] == "processes"
    assert Evidence("pin_memory", True, "flag", "facts").as_json()["unit"] == "flag"


def test_an_empty_cache_once_per_step_is_called_once() -> None:
    from perfweb_recommender.rules import REGISTRY

    found = REGISTRY["memory.empty_cache_in_loop"].func(
        RunEvidence(facts={"cuda.empty_cache_per_step": 1.0})
    )
    assert found is not None and "called 1 time per step" in found.title
