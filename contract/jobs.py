"""The size of an optimisation job: what the server accepts when a job is created and what
the runner checks again when it claims one (a server that lies gets no bigger experiment).

An interval needs at least 2 rounds (one cannot show the drift between rounds); a job adds
rounds while its verdict is inconclusive, up to MAX_ROUNDS.
"""

from __future__ import annotations

# name: (least, most), inclusive
SIZE_LIMITS = {"rounds": (2, 20), "steps": (3, 1000), "warmup": (0, 100)}
MAX_ROUNDS = SIZE_LIMITS["rounds"][1]
