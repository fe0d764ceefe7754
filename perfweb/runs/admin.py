from __future__ import annotations

from django.contrib import admin

from perfweb.runs.models import Device, Run, RunProcess


class RunProcessInline(admin.TabularInline):
    model = RunProcess
    extra = 0


class DeviceInline(admin.TabularInline):
    model = Device
    extra = 0


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("run_id", "name", "project", "status", "host", "started_at", "last_seen_at")
    list_filter = ("status", "project")
    search_fields = ("run_id", "name", "host")
    inlines = [RunProcessInline, DeviceInline]
