"""Optimisation jobs: measure a fix A/B on the host where the run ran.

A job is a run plus knob settings from the closed list (contract/perfweb_contract/knobs.py), never a
command: the runner runs the command an agent recorded on its own host. Claims expire, so a runner
that dies leaves a job that the sweep marks failed rather than one stuck "running".
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from perfweb.projects.models import Project
from perfweb.runs.models import Run
from perfweb_contract.ab.results import AGREEMENT_RTOL, AGREEMENT_TOP1_MIN
from perfweb_contract.jobs import RUNNER_ID_MAX
from perfweb_contract.protocol import HOST_MAX
from perfweb_contract.verdicts import VERDICT_LABELS


class Job(models.Model):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)]
    TERMINAL = (SUCCEEDED, FAILED, CANCELLED)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="jobs")
    host = models.CharField(max_length=HOST_MAX)  # the run's host: only its runner may claim it
    finding_id = models.CharField(
        max_length=100, blank=True
    )  # FIXES.md id, e.g. dataloader.num_workers
    knobs = models.JSONField()  # {"num_workers": 4}, validated against the closed list
    rounds = models.PositiveSmallIntegerField(default=5)  # at least this many rounds
    max_rounds = models.PositiveSmallIntegerField(default=20)  # more while inconclusive
    time_budget_s = models.PositiveIntegerField(default=1800)  # no extra round past this
    steps = models.PositiveIntegerField(default=20)
    warmup = models.PositiveIntegerField(default=3)
    # Output agreement a faster candidate must keep to count as verified
    # (contract/perfweb_contract/ab/results.py): top-1 agreement at least `agreement_top1`, max
    # relative difference at most `agreement_rtol`.
    agreement_top1 = models.FloatField(default=AGREEMENT_TOP1_MIN)
    agreement_rtol = models.FloatField(default=AGREEMENT_RTOL)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    status = models.CharField(max_length=10, choices=STATUSES, default=QUEUED)
    claim_token = models.CharField(max_length=64, blank=True)  # sha256 of the claim secret
    runner_id = models.CharField(max_length=RUNNER_ID_MAX, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)  # the A/B comparison, computed here
    verdict = models.CharField(max_length=32, blank=True)
    stop_reason = models.CharField(max_length=200, blank=True)
    speedup = models.FloatField(null=True, blank=True)
    ci_low = models.FloatField(null=True, blank=True)
    ci_high = models.FloatField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["project", "host", "status", "created_at"], name="job_claim"),
            models.Index(fields=["status", "claim_expires_at"], name="job_expiry"),
        ]

    def __str__(self) -> str:
        return f"job {self.id} ({self.finding_id or 'knobs'} on {self.run_id})"

    @property
    def state(self) -> str:
        """The job's state as pages say it, apart from its verdict: queued, running, done
        (it ran to its end, whatever it found: a fix measured slower is a done job with the
        verdict "slower"), failed or cancelled."""
        return "done" if self.status == self.SUCCEEDED else self.status

    @property
    def verdict_label(self) -> str:
        """The verdict as pages print it ("inconclusive — more rounds needed")."""
        return VERDICT_LABELS.get(self.verdict, self.verdict)


class JobArm(models.Model):
    """One measured arm of one round, streamed by the runner as it finishes."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="arms")
    round = models.PositiveSmallIntegerField()
    arm = models.CharField(max_length=10)  # "baseline" | "candidate"
    median_s = models.FloatField()
    mean_s = models.FloatField(null=True, blank=True)  # what the speedup compares
    step_s = models.JSONField(default=list)
    loss = models.JSONField(default=list)  # per step, warm-up included; [] when not visible
    kind = models.CharField(max_length=10, default="unknown")  # training | inference | unknown
    batch_sizes = models.JSONField(null=True, blank=True)  # per kept step; None: not seen
    peak_rss_bytes = models.BigIntegerField(null=True, blank=True)
    cuda_max_allocated_bytes = models.BigIntegerField(null=True, blank=True)
    # The candidate's output agreement with the same round's baseline, as the agent
    # summarised it (samples, top1_agreement, max/mean abs diff, max rel diff); None elsewhere.
    outputs = models.JSONField(null=True, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "round", "arm"], name="jobarm_unique")
        ]
