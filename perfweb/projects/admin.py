from __future__ import annotations

from django.contrib import admin

from perfweb.projects.models import IngestToken, Membership, Project

admin.site.register(Project)
admin.site.register(Membership)


@admin.register(IngestToken)
class IngestTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "project", "label", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "digest")
