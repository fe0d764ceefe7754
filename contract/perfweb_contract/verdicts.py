"""The verdicts of an A/B measurement: what the engine decides, the server stores and pages show.

The statistics that reach a verdict are in contract/perfweb_contract/ab/ (perfweb_contract.ab); the
names are shared, so that the runner, the server and the CLI say the same word for the same outcome.
"""

from __future__ import annotations

FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no measurable difference"
INCONCLUSIVE = "inconclusive"
# Faster, but the outputs (inference) or the loss (training) moved beyond tolerance: never
# "verified", whatever the speed-up.
CHANGES_RESULTS = "faster but changes results"
VERDICTS = (FASTER, SLOWER, NO_DIFFERENCE, INCONCLUSIVE, CHANGES_RESULTS)
# What a page or the CLI prints for a verdict.
VERDICT_LABELS = {
    FASTER: FASTER,
    SLOWER: SLOWER,
    NO_DIFFERENCE: NO_DIFFERENCE,
    INCONCLUSIVE: "inconclusive \u2014 more rounds needed",
    CHANGES_RESULTS: CHANGES_RESULTS,
}
