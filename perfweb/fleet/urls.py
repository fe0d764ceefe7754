from __future__ import annotations

from django.urls import path

from perfweb.fleet import views

urlpatterns = [path("metrics", views.metrics, name="metrics")]
