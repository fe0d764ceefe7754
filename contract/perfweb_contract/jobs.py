"""The size of an optimisation job: what the server accepts when a job is created and what
the runner checks again when it claims one (a server that lies gets no bigger experiment).

An interval needs at least 2 rounds (one cannot show the drift between rounds); a job adds
rounds while its verdict is inconclusive, up to MAX_ROUNDS.
"""

from __future__ import annotations

# name: (least, most), inclusive
SIZE_LIMITS = {"rounds": (2, 20), "steps": (3, 1000), "warmup": (0, 100)}
MAX_ROUNDS = SIZE_LIMITS["rounds"][1]
# The new-job form's sizes (what "Try this fix" queues) and every job's time bound: the
# runner starts no extra round that would end past it. The findings panel sizes the smallest
# effect a job can resolve by these, the jobs app creates its jobs with them.
FORM_SIZES = {"rounds": 5, "steps": 20, "warmup": 3}
TIME_BUDGET_S = 1800

# A runner's posts (docs/jobs.md): the server refuses one past these limits.
RUNNER_ID_MAX = 64  # characters of a claim's `runner_id`
ARM_STEPS_MAX = 10_000  # entries of an arm's `step_s` and `loss`
ARM_BATCH_MAX = 1 << 31  # an arm's batch size per step
ARM_BYTES_MAX = 1 << 50  # an arm's peak memory: above 1 PiB it is not a measurement
OUTPUT_SAMPLES_MAX = 10**9  # requests an arm's output agreement summarises
OUTPUT_NOTE_MAX = 200  # characters of an output agreement's `note`
