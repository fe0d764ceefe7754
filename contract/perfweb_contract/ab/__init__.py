"""The statistics of an A/B measurement, shared by the agent's engine, `perf-agent ab` and the
server, which judges a job's stored arms again with the same functions (stdlib only: it runs
on the training host next to the user's job).

- `maths`: Student's t, the trimmed mean and the always-valid interval (a normal-mixture
  confidence sequence), with no notion of arms or verdicts;
- `results`: what was measured (`Round`, `Comparison` and their parts), parsed once from the
  stored JSON by `Comparison.from_dict`; the output-agreement and loss-parity checks;
- `decision`: the round statistic, the speed-up and its interval, the warm-up, the verdict
  and when to stop adding rounds;
- `presentation`: the before/after table and the sentences that pages and the CLI print.
"""
