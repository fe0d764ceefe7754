"""The alerts pages: thin adapters over selectors (reads) and services (writes).

Every page is scoped to the user's projects: another project's page is a 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from perfweb.alerts import conf, selectors, services
from perfweb.alerts.channels import CHANNELS
from perfweb.alerts.forms import ChannelForm, RuleForm, SnoozeForm, config_form
from perfweb.alerts.tasks import enqueue_delivery
from perfweb.projects.selectors import project_list_for_user
from perfweb_recommender.conditions import CONDITIONS


def _back(project_id: int) -> HttpResponseRedirect:
    return redirect(reverse("alerts:project", kwargs={"project_id": project_id}))


@require_GET
@login_required
def index(request: HttpRequest) -> HttpResponse:
    projects = list(project_list_for_user(user=request.user))
    if len(projects) == 1:
        return _back(projects[0].id)
    return render(request, "alerts/index.html", {"projects": projects})


@require_GET
@login_required
def project_alerts(request: HttpRequest, project_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    channels = [
        (c, selectors.attempt_list(channel=c, limit=1).first())
        for c in selectors.channel_list(project=project)
    ]
    new_channel_forms = [
        (
            kind,
            module.LABEL,
            ChannelForm(initial={"kind": kind, "name": module.LABEL}),
            config_form(kind=kind),
        )
        for kind, module in CHANNELS.items()
    ]
    return render(
        request,
        "alerts/project.html",
        {
            "project": project,
            "alerts": selectors.alert_list(project=project),
            "rules": selectors.rule_list(project=project),
            "channels": channels,
            "events": selectors.event_list(project=project, limit=20),
            "rule_form": RuleForm(),
            "new_channel_forms": new_channel_forms,
            "conditions": CONDITIONS,
            "interval_s": conf.evaluation_interval(),
            "now": timezone.now(),
        },
    )


@require_POST
@login_required
def rule_new(request: HttpRequest, project_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    form = RuleForm(request.POST)
    if not form.is_valid():
        return render(
            request,
            "alerts/rule.html",
            {"project": project, "form": form, "rule": None},
            status=400,
        )
    services.rule_create(project=project, **form.cleaned_data)
    messages.success(request, "Rule added.")
    return _back(project.id)


@require_http_methods(["GET", "POST"])
@login_required
def rule_edit(request: HttpRequest, project_id: int, rule_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    rule = selectors.rule_get(project=project, rule_id=rule_id)
    form = RuleForm(request.POST or None, instance=rule)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Rule saved.")
        return _back(project.id)
    status = 400 if request.method == "POST" else 200
    return render(
        request, "alerts/rule.html", {"project": project, "form": form, "rule": rule}, status=status
    )


@require_POST
@login_required
def rule_remove(request: HttpRequest, project_id: int, rule_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    services.rule_delete(rule=selectors.rule_get(project=project, rule_id=rule_id))
    messages.success(request, "Rule deleted.")
    return _back(project.id)


@require_POST
@login_required
def channel_new(request: HttpRequest, project_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    form = ChannelForm(request.POST)
    kind = request.POST.get("kind", "")
    config = config_form(kind=kind, data=request.POST) if kind in CHANNELS else None
    if config is None or not (form.is_valid() and config.is_valid()):
        return render(
            request,
            "alerts/channel.html",
            {"project": project, "form": form, "config": config, "channel": None},
            status=400,
        )
    services.channel_create(
        project=project, kind=kind, name=form.cleaned_data["name"], config=config.cleaned_data
    )
    messages.success(request, "Channel added.")
    return _back(project.id)


@require_http_methods(["GET", "POST"])
@login_required
def channel_edit(request: HttpRequest, project_id: int, channel_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    channel = selectors.channel_get(project=project, channel_id=channel_id)
    initial = {"kind": channel.kind, "name": channel.name, "enabled": channel.enabled}
    form = ChannelForm(request.POST or None, initial=initial)
    config = config_form(kind=channel.kind, data=request.POST or None, initial=channel.config)
    if request.method == "POST" and form.is_valid() and config.is_valid():
        services.channel_update(
            channel=channel,
            name=form.cleaned_data["name"],
            config=config.cleaned_data,
            enabled=form.cleaned_data["enabled"],
        )
        messages.success(request, "Channel saved.")
        return _back(project.id)
    return render(
        request,
        "alerts/channel.html",
        {
            "project": project,
            "form": form,
            "config": config,
            "channel": channel,
            "attempts": selectors.attempt_list(channel=channel, limit=20),
        },
        status=400 if request.method == "POST" else 200,
    )


@require_POST
@login_required
def channel_remove(request: HttpRequest, project_id: int, channel_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    services.channel_delete(channel=selectors.channel_get(project=project, channel_id=channel_id))
    messages.success(request, "Channel deleted.")
    return _back(project.id)


@require_POST
@login_required
def channel_test(request: HttpRequest, project_id: int, channel_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    channel = selectors.channel_get(project=project, channel_id=channel_id)
    services.channel_send_test(channel=channel, user=request.user, enqueue=enqueue_delivery)
    messages.success(request, f"Test message queued for {channel.name}; its outcome shows below.")
    return _back(project.id)


@require_POST
@login_required
def alert_ack(request: HttpRequest, project_id: int, alert_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    services.alert_acknowledge(
        alert=selectors.alert_get(project=project, alert_id=alert_id), user=request.user
    )
    return _back(project.id)


@require_POST
@login_required
def alert_snooze_view(request: HttpRequest, project_id: int, alert_id: int) -> HttpResponse:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    alert = selectors.alert_get(project=project, alert_id=alert_id)
    form = SnoozeForm(request.POST)
    if form.is_valid():
        services.alert_snooze(alert=alert, minutes=form.cleaned_data["minutes"])
    else:
        messages.error(request, "Snooze for between 0 and 10080 minutes.")
    return _back(project.id)
