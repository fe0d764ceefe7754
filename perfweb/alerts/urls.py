from __future__ import annotations

from django.urls import path

from perfweb.alerts import views

app_name = "alerts"

urlpatterns = [
    path("", views.index, name="index"),
    path("<int:project_id>/", views.project_alerts, name="project"),
    path("<int:project_id>/rules/new/", views.rule_new, name="rule_new"),
    path("<int:project_id>/rules/<int:rule_id>/", views.rule_edit, name="rule_edit"),
    path("<int:project_id>/rules/<int:rule_id>/delete/", views.rule_remove, name="rule_delete"),
    path("<int:project_id>/channels/new/", views.channel_new, name="channel_new"),
    path("<int:project_id>/channels/<int:channel_id>/", views.channel_edit, name="channel_edit"),
    path(
        "<int:project_id>/channels/<int:channel_id>/delete/",
        views.channel_remove,
        name="channel_delete",
    ),
    path(
        "<int:project_id>/channels/<int:channel_id>/test/", views.channel_test, name="channel_test"
    ),
    path("<int:project_id>/alerts/<int:alert_id>/ack/", views.alert_ack, name="alert_ack"),
    path(
        "<int:project_id>/alerts/<int:alert_id>/snooze/",
        views.alert_snooze_view,
        name="alert_snooze",
    ),
]
