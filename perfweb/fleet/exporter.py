"""`/metrics`: a project's live runs in the Prometheus text format, built by prometheus_client
(its metric families and its exposition writer) from one fleet snapshot per scrape.

Labels follow what users asked DCGM's exporter for: project, run, run name, host, rank and
GPU, so a Grafana panel can group by any of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from perfweb.fleet.snapshot import LATEST_GAUGES, RunLabels, Snapshot

RUN_LABELS = ["project", "run", "run_name", "host"]
DEVICE_LABELS = [*RUN_LABELS, "device", "rank", "gpu"]


class SnapshotCollector:
    """A prometheus_client collector over one snapshot (a registry made per scrape)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        yield from self._runs()
        yield from self._latest()
        yield from self._steps()
        yield from self._phases()
        yield from self._scalars()
        yield from self._findings()

    def _run_values(self, run: RunLabels) -> list[str]:
        return [self.snapshot.project, run.run, run.run_name, run.host]

    def _runs(self) -> Iterator[Metric]:
        by_status = GaugeMetricFamily(
            "perfweb_runs", "runs of the project by status", labels=["project", "status"]
        )
        for status, count in sorted(self.snapshot.runs_by_status.items()):
            by_status.add_metric([self.snapshot.project, status], count)
        yield by_status
        info = GaugeMetricFamily(
            "perfweb_run_live",
            "1 for each running run, with its kind (training or inference)",
            labels=[*RUN_LABELS, "kind"],
        )
        for run in self.snapshot.runs:
            info.add_metric([*self._run_values(run), run.kind], 1)
        yield info

    def _latest(self) -> Iterator[Metric]:
        for name, (exported, help_text) in LATEST_GAUGES.items():
            family = GaugeMetricFamily(exported, help_text, labels=DEVICE_LABELS)
            for value in self.snapshot.latest.get(name, []):
                labels = [*self._run_values(value.run), value.device, value.rank, value.gpu]
                family.add_metric(labels, value.value)
            yield family

    def _steps(self) -> Iterator[Metric]:
        labels = [*RUN_LABELS, "rank", "quantile"]
        step = GaugeMetricFamily(
            "perfweb_step_duration_seconds",
            "training step time over the last minute, by quantile",
            labels=labels,
        )
        latency = GaugeMetricFamily(
            "perfweb_request_latency_seconds",
            "inference request latency over the last minute, by quantile",
            labels=labels,
        )
        wait = GaugeMetricFamily(
            "perfweb_data_wait_ratio",
            "share of step time spent waiting on the DataLoader over the last minute",
            labels=[*RUN_LABELS, "rank"],
        )
        for stats in self.snapshot.steps:
            family = latency if stats.run.kind == "inference" else step
            for q, seconds in stats.quantiles.items():
                family.add_metric([*self._run_values(stats.run), stats.rank, f"{q:g}"], seconds)
            if stats.data_wait_share is not None:
                wait.add_metric([*self._run_values(stats.run), stats.rank], stats.data_wait_share)
        yield from (step, latency, wait)

    def _phases(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "perfweb_step_phase_seconds",
            "the step anatomy: median seconds per step in each phase (data, copy, forward, "
            "backward, optimizer, collective, output_copy, other) over the last minute",
            labels=[*RUN_LABELS, "rank", "phase"],
        )
        for value in self.snapshot.phases:
            family.add_metric(
                [*self._run_values(value.run), value.rank, value.phase], value.seconds
            )
        yield family
        mfu = GaugeMetricFamily(
            "perfweb_model_flops_utilization_ratio",
            "model FLOP utilisation: one step's FLOPs (counted once) over the last minute's "
            "median step, against the device's peak for the run's dtype (or the CPU's "
            "measured peak)",
            labels=[*RUN_LABELS, "rank"],
        )
        for run, rank, ratio in self.snapshot.mfu:
            mfu.add_metric([*self._run_values(run), rank], ratio)
        yield mfu

    def _scalars(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "perfweb_script_scalar",
            "the latest value of each scalar the script logs (perfweb_agent.log, or the "
            "Hugging Face / Lightning callbacks' loss, learning rate and grad norm)",
            labels=[*RUN_LABELS, "rank", "name"],
        )
        for scalar in self.snapshot.scalars:
            family.add_metric(
                [*self._run_values(scalar.run), scalar.rank, scalar.name], scalar.value
            )
        yield family

    def _findings(self) -> Iterator[Metric]:
        gain = GaugeMetricFamily(
            "perfweb_finding_estimated_gain_ratio",
            "each live run's findings: the estimated share of step time the fix recovers",
            labels=[*RUN_LABELS, "id", "risk"],
        )
        by_id: Counter[str] = Counter()
        for run, rule_id, risk, estimated in self.snapshot.findings:
            gain.add_metric([*self._run_values(run), rule_id, risk], estimated)
            by_id[rule_id] += 1
        yield gain
        count = GaugeMetricFamily(
            "perfweb_findings", "live runs with each finding id", labels=["project", "id"]
        )
        for rule_id, n in sorted(by_id.items()):
            count.add_metric([self.snapshot.project, rule_id], n)
        yield count


def exposition(snapshot: Snapshot) -> bytes:
    """The snapshot in Prometheus' text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))  # type: ignore[arg-type]
    return generate_latest(registry)
