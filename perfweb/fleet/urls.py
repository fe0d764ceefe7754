from __future__ import annotations

from django.urls import path

from perfweb.fleet import views

app_name = "fleet"

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path("fleet/", views.waste_page, name="waste"),
    path("fleet/prices", views.price_save, name="price_save"),
]
