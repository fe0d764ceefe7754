"""Runs, the processes that report into them, their devices and the batch receipts."""

from __future__ import annotations

from django.db import models

from perfweb.projects.models import Project
from perfweb_contract import protocol


class Run(models.Model):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    LOST = "lost"
    STATUSES = [(s, s) for s in (RUNNING, FINISHED, FAILED, LOST)]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=64, unique=True)  # chosen by the agent
    name = models.CharField(max_length=protocol.RUN_NAME_MAX, blank=True)
    command = models.JSONField(default=list, blank=True)
    cwd = models.CharField(max_length=protocol.CWD_MAX, blank=True)
    host = models.CharField(max_length=protocol.HOST_MAX, blank=True)
    status = models.CharField(max_length=10, choices=STATUSES, default=RUNNING)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField()
    facts = models.JSONField(default=dict, blank=True)
    tags = models.JSONField(default=dict, blank=True)
    step_count = models.BigIntegerField(default=0)  # the most steps any one process recorded
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["project", "-started_at"], name="run_project_started"),
            models.Index(fields=["status", "last_seen_at"], name="run_status_seen"),
        ]

    def __str__(self) -> str:
        return self.name or self.run_id


class RunProcess(models.Model):
    """One agent: the launcher or a rank of the run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="processes")
    agent_id = models.CharField(max_length=64)
    role = models.CharField(max_length=16)
    rank = models.IntegerField(null=True, blank=True)
    local_rank = models.IntegerField(null=True, blank=True)
    world_size = models.IntegerField(null=True, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    host = models.CharField(max_length=protocol.HOST_MAX, blank=True)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # When the agent said at its exit that its finish waits in the spill directory on its
    # host (a heartbeat's `unsent`); exit_code is then the one that finish will carry.
    unsent_at = models.DateTimeField(null=True, blank=True)
    step_count = models.BigIntegerField(default=0)
    dropped = models.BigIntegerField(default=0)
    # What the agent says it produced in all (finish's `produced`: samples, steps, dropped).
    produced = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "agent_id"], name="runprocess_unique")
        ]


class Device(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="devices")
    key = models.CharField(max_length=32)  # "gpu:0", as in the metrics' `device`
    kind = models.CharField(max_length=protocol.DEVICE_KIND_MAX, blank=True)
    index = models.IntegerField(null=True, blank=True)
    name = models.CharField(max_length=protocol.DEVICE_NAME_MAX, blank=True)
    uuid = models.CharField(max_length=protocol.DEVICE_UUID_MAX, blank=True)
    memory_total = models.BigIntegerField(null=True, blank=True)
    power_limit = models.FloatField(null=True, blank=True)
    extra = models.JSONField(default=dict, blank=True)  # any other fields the agent sent

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="device_unique")]


class BatchReceipt(models.Model):
    """(run, agent, seq) of every stored batch: the idempotency key, written in the same
    transaction as the batch's data."""

    # db_index=False: receipt_unique starts with the run and serves lookups by run too; a
    # second index would be one more write per batch.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="receipts", db_index=False)
    agent_id = models.CharField(max_length=64)
    seq = models.BigIntegerField()
    samples = models.IntegerField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "agent_id", "seq"], name="receipt_unique")
        ]
