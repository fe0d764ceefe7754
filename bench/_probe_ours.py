"""One benchmark measurement of the recommender: load + every analysis + every rule."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _rss import current_rss_mib, peak_rss_mib  # noqa: E402

from perfweb_recommender.api import analyze_path  # noqa: E402


def main() -> None:
    """Print {"wall_s", "peak_rss_mib", "added_rss_mib"} for one trace directory."""
    baseline = current_rss_mib()
    start = time.perf_counter()
    report = analyze_path(Path(sys.argv[1]))
    wall = time.perf_counter() - start
    assert report.traces
    peak = peak_rss_mib()
    print(json.dumps({"wall_s": wall, "peak_rss_mib": peak, "added_rss_mib": peak - baseline}))


if __name__ == "__main__":
    main()
