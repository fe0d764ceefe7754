from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from perfweb.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="dashboard/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.runs_list, name="runs"),
    path("runs/<str:run_id>/", views.run_detail, name="run"),
    path("compare/", views.compare, name="compare"),
    path("assets/plotly-<str:version>.min.js", views.plotly_js, name="plotly_js"),
]
