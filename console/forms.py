from __future__ import annotations

from django import forms

from console.accounts import unknown_zone_words
from console.keys import MAX_DAYS
from console.lists import ListFilter, both_ways
from console.models import KeyScope, Role
from console.team_actions import ROLE_CHOICE_WORDS, hf_token_problem
from console.time_zones import is_known_zone


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="What the key is for, e.g. “notebook” or “ci”.",
        error_messages={"required": "Give the key a name, so you can tell your keys apart."},
    )

    scope = forms.ChoiceField(
        choices=KeyScope.choices,
        initial=KeyScope.OPERATE,
        required=False,  # none chosen: operate, as keys made before scopes existed
        error_messages={"invalid_choice": "Choose read, chat or operate as the key's scope."},
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_DAYS,
        help_text="Empty: the key does not expire.",
        error_messages={
            "invalid": "Give the days as a whole number, or leave it empty.",
            "min_value": "A key must live at least 1 day (or leave it empty: no expiry).",
            "max_value": f"At most {MAX_DAYS} days (or leave it empty: no expiry).",
        },
    )

    def clean_scope(self) -> str:
        return str(self.cleaned_data.get("scope") or KeyScope.OPERATE)

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the key a name, so you can tell your keys apart.")
        return name


class TimeZoneForm(forms.Form):
    """The zone the user's pages show times in; empty: the browser's."""

    time_zone = forms.CharField(required=False, max_length=64, strip=True)

    def clean_time_zone(self) -> str:
        zone: str = self.cleaned_data.get("time_zone", "")
        if zone and not is_known_zone(zone):
            raise forms.ValidationError(unknown_zone_words(zone))
        return zone


class AddMemberForm(forms.Form):
    username = forms.CharField(
        max_length=150,
        error_messages={"required": "Give the username of the person to add."},
    )
    role = forms.ChoiceField(
        choices=Role.choices,
        initial=Role.VIEWER,
        error_messages={"required": ROLE_CHOICE_WORDS, "invalid_choice": ROLE_CHOICE_WORDS},
    )


class RoleForm(forms.Form):
    role = forms.ChoiceField(
        choices=Role.choices,
        error_messages={"required": ROLE_CHOICE_WORDS, "invalid_choice": ROLE_CHOICE_WORDS},
    )


class HfTokenForm(forms.Form):
    """Write-only: the page never renders the token back, not even with an error."""

    hf_token = forms.CharField(
        max_length=200,
        strip=True,
        error_messages={"required": "Paste the token to store (or use Clear to remove it)."},
    )

    def clean_hf_token(self) -> str:
        token: str = self.cleaned_data["hf_token"]
        problem = hf_token_problem(token)
        if problem:
            raise forms.ValidationError(problem)
        return token


class KeyFilter(ListFilter):
    """GET /api/v1/keys: the caller's keys, newest first or by name, paged like every list."""

    list_name = "keys"
    orders = (
        *both_ways("newest", "Newest first", ("-created_at", "-pk")),
        *both_ways("name", "Name", ("name", "pk")),
    )
