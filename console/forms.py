from __future__ import annotations

from django import forms


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="What the key is for, e.g. “notebook” or “ci”.",
        error_messages={"required": "Give the key a name, so you can tell your keys apart."},
    )

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the key a name, so you can tell your keys apart.")
        return name
