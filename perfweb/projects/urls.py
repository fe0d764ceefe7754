from __future__ import annotations

from django.urls import path

from perfweb.projects import views

app_name = "projects"

urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.project_new, name="project_new"),
    path("<int:project_id>/tokens/new/", views.token_new, name="token_new"),
    path("<int:project_id>/tokens/<int:token_id>/revoke/", views.token_revoke, name="token_revoke"),
    path("<int:project_id>/members/new/", views.member_invite, name="member_invite"),
]
