from __future__ import annotations

from django import forms

from console.keys import MAX_DAYS
from console.models import KeyScope


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
