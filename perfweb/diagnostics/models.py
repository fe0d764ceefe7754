"""Uploaded profiler traces, a run's stored findings and their fixes' measured verifications,
and its diagnosis bookkeeping."""

from __future__ import annotations

from django.db import models

from perfweb.runs.models import Run


class Trace(models.Model):
    """One complete profiler window (gzip Kineto JSON), joined from its chunks and checked.

    The file lives at `path` (relative to the trace directory); `summary` caches the
    recommender's analysis so that a trace is parsed once, not at every diagnosis.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="traces")
    agent_id = models.CharField(max_length=64)
    name = models.CharField(max_length=128)
    rank = models.IntegerField(null=True, blank=True)
    path = models.CharField(max_length=600)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    analysed_at = models.DateTimeField(null=True, blank=True)
    summary = models.JSONField(null=True, blank=True)
    analysis_error = models.CharField(max_length=500, blank=True)  # permanent: not retried

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "agent_id", "name"], name="trace_unique")
        ]


class Finding(models.Model):
    """One diagnosis of a run, as the recommender ranked it (`rank` 1 is the best fix)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="findings")
    rule_id = models.CharField(max_length=100)  # a FIXES.md id
    rank = models.PositiveIntegerField()
    score = models.FloatField()
    title = models.CharField(max_length=300)
    risk = models.CharField(max_length=20)
    confidence = models.FloatField()
    estimated_gain = models.FloatField()  # fraction of step time recoverable
    gain_basis = models.TextField(blank=True)
    measured_gain = models.FloatField(null=True, blank=True)  # from a verifying job
    evidence = models.JSONField(default=list, blank=True)  # [{label, value, unit, source}]
    fix = models.JSONField(default=dict, blank=True)  # {text, snippet, knob, knobs}
    doc = models.TextField(blank=True)  # the rule's What / Why / Fix
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "rule_id"], name="finding_unique")]
        indexes = [models.Index(fields=["run", "rank"], name="finding_run_rank")]

    def __str__(self) -> str:
        return f"{self.rule_id}: {self.title}"


class RunDiagnosis(models.Model):
    """When a run was last diagnosed and who is diagnosing it now.

    `claimed_until` is an expiring claim (a worker killed mid-diagnosis leaves a claim that
    simply runs out); `data_seen_at` is the run's `last_seen_at` when that diagnosis began,
    so the sweep can tell that new data has arrived since; `queued_at` is when the run's one
    pending diagnosis message was sent (cleared when a worker takes it; a lost message's
    mark runs out after PERFWEB_DIAGNOSE_QUEUED_TTL), so that requests coalesce.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="diagnosis")
    queued_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    diagnosed_at = models.DateTimeField(null=True, blank=True)
    data_seen_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)


class FixVerification(models.Model):
    """What the latest finished job measured for a finding of a run's fix: the ranking reads
    it (`verification.fix_verification_record` writes it when a job finishes). The table
    keeps the name it had in the jobs app (migration jobs 0005 / diagnostics 0003)."""

    VERIFIED = "verified"
    REFUTED = "refuted"
    INCONCLUSIVE = "inconclusive"  # measured, but too wide to decide: the estimate stands
    STATUSES = [(s, s) for s in (VERIFIED, REFUTED, INCONCLUSIVE)]

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="fix_verifications")
    finding_id = models.CharField(max_length=100)
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=12, choices=STATUSES)
    measured_gain = models.FloatField()  # fraction of step time recovered (1 - 1/speedup)
    speedup = models.FloatField()
    ci_low = models.FloatField()
    ci_high = models.FloatField()
    reason = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "jobs_fixverification"
        constraints = [
            models.UniqueConstraint(fields=["run", "finding_id"], name="fixverification_unique")
        ]
