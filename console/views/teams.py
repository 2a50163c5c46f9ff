"""A team's page: its members and its Hugging Face token, managed by its admins."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_POST

from console import team_actions
from console.access import NEEDS_VIEW, has_role
from console.forms import AddMemberForm, HfTokenForm, RoleForm
from console.models import Role, Team


def get_team(user: Any, name: str) -> Team:
    """The team if the user is one of its members (or a platform admin); else "not found"."""
    team = Team.objects.filter(name=name).first()
    if team is None or not has_role(user, team.pk, NEEDS_VIEW):
        raise Http404("No such team among yours.")
    return team


def team_page(request: HttpRequest, team: Team, **forms: Any) -> HttpResponse:
    context = {
        "team": team,
        "members": team.memberships.select_related("user").order_by("user__username"),
        "manages": team_actions.manages_team(request.user, team),
        "roles": Role.choices,
        "add_form": forms.get("add_form") or AddMemberForm(),
        "token_form": forms.get("token_form") or HfTokenForm(),
    }
    return render(request, "console/team.html", context)


@require_GET
def team_detail(request: HttpRequest, name: str) -> HttpResponse:
    return team_page(request, get_team(request.user, name))


def refused_or_done(request: HttpRequest, team: Team, change: Callable[[], str]) -> HttpResponse:
    """Run a team action; show its words, or the words of its refusal; back to the team."""
    try:
        messages.success(request, change())
    except team_actions.TeamActionRefused as refused:
        messages.error(request, str(refused))
    return redirect("team_detail", name=team.name)


@require_POST
def add_team_member(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    team_actions.require_team_admin(request.user, team)
    form = AddMemberForm(request.POST)
    if not form.is_valid():
        return team_page(request, team, add_form=form)
    data = form.cleaned_data
    return refused_or_done(
        request,
        team,
        lambda: team_actions.add_member(request.user, team, data["username"], data["role"]),
    )


@require_POST
def change_team_role(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    team = get_team(request.user, name)
    team_actions.require_team_admin(request.user, team)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, team_actions.ROLE_CHOICE_WORDS)
        return redirect("team_detail", name=team.name)
    role = form.cleaned_data["role"]
    return refused_or_done(
        request, team, lambda: team_actions.change_role(request.user, team, pk, role)
    )


@require_POST
def remove_team_member(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    team = get_team(request.user, name)
    return refused_or_done(
        request, team, lambda: team_actions.remove_member(request.user, team, pk)
    )


@require_POST
@sensitive_post_parameters("hf_token")
def set_team_hf_token(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    team_actions.require_team_admin(request.user, team)
    form = HfTokenForm(request.POST)
    if not form.is_valid():
        return team_page(request, team, token_form=form)
    token = form.cleaned_data["hf_token"]
    return refused_or_done(
        request, team, lambda: team_actions.set_hf_token(request.user, team, token)
    )


@require_POST
def clear_team_hf_token(request: HttpRequest, name: str) -> HttpResponse:
    team = get_team(request.user, name)
    return refused_or_done(request, team, lambda: team_actions.clear_hf_token(request.user, team))
