"""The user's account: time zone and password, and the teams they are in."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_POST

from console import accounts, time_zones
from console.forms import TimeZoneForm
from console.models import Membership


def account_page(request: HttpRequest, **forms: Any) -> HttpResponse:
    """The account page, with the forms given (bound, with their errors) or fresh ones."""
    chosen = time_zones.chosen_zone(request.user)
    context = {
        "time_zone_form": forms.get("time_zone_form")
        or TimeZoneForm(initial={"time_zone": chosen}),
        "password_form": forms.get("password_form") or PasswordChangeForm(request.user),
        "chosen_zone": chosen,
        "browser_zone": browser_zone(request),
        "zones": time_zones.known_zones(),
        "memberships": Membership.objects.filter(user=request.user).select_related("team"),
    }
    return render(request, "console/account.html", context)


def browser_zone(request: HttpRequest) -> str:
    """The zone the browser said, when it is a real one; empty without JavaScript."""
    said = request.COOKIES.get(time_zones.BROWSER_ZONE_COOKIE, "")
    return said if time_zones.is_known_zone(said) else ""


@require_GET
def account(request: HttpRequest) -> HttpResponse:
    return account_page(request)


@require_POST
def set_time_zone(request: HttpRequest) -> HttpResponse:
    form = TimeZoneForm(request.POST)
    if not form.is_valid():
        return account_page(request, time_zone_form=form)
    messages.success(request, accounts.set_time_zone(request.user, form.cleaned_data["time_zone"]))
    return redirect("account")


@require_POST
@sensitive_post_parameters("old_password", "new_password1", "new_password2")
def change_password(request: HttpRequest) -> HttpResponse:
    form = PasswordChangeForm(request.user, request.POST)
    if not form.is_valid():
        return account_page(request, password_form=form)
    done = accounts.change_password(request.user, form.cleaned_data["new_password1"])
    update_session_auth_hash(request, request.user)  # this browser stays logged in
    messages.success(request, done)
    return redirect("account")
