"""One benchmark measurement of HTA, through ../shared/peer-traces/run_hta.py's `run_one`.

Runs in HTA's own virtual environment: python _probe_hta.py RUN_HTA_PY TRACE_DIR
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rss import current_rss_mib, peak_rss_mib  # noqa: E402


def main() -> None:
    """Print {"wall_s", "peak_rss_mib", "added_rss_mib"} for one trace directory."""
    spec = importlib.util.spec_from_file_location("run_hta", sys.argv[1])
    assert spec and spec.loader
    run_hta = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_hta)
    import hta.trace_analysis  # noqa: F401 - imported before the baseline, as ours is
    import pandas  # noqa: F401

    logging.getLogger("hta").setLevel(logging.WARNING)
    baseline = current_rss_mib()
    with contextlib.redirect_stdout(io.StringIO()):
        result = run_hta.run_one(sys.argv[2])
    if result["errors"]:
        raise SystemExit(f"HTA errors: {result['errors']}")
    peak = peak_rss_mib()
    wall = result["timings_s"]["total"]
    print(json.dumps({"wall_s": wall, "peak_rss_mib": peak, "added_rss_mib": peak - baseline}))


if __name__ == "__main__":
    main()
