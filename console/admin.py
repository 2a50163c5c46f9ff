from typing import Any

from django import forms
from django.contrib import admin

from console.models import ApiKey, AuditEntry, GroupRule, Membership, SignOnIdentity, Team
from console.team_actions import hf_token_problem


class WriteOnlyInput(forms.PasswordInput):
    """Never renders a value back, not even what was just submitted with an error."""

    def __init__(self) -> None:
        super().__init__(render_value=False, attrs={"autocomplete": "off"})


class TeamAdminForm(forms.ModelForm):
    """The Hugging Face token is write-only: stored encrypted, never shown back."""

    hf_token = forms.CharField(
        label="Hugging Face token",
        widget=WriteOnlyInput(),
        required=False,
        strip=True,
        max_length=200,
        help_text=(
            "Used to download gated models for this team. Paste a token to replace the stored "
            "one; leave empty to keep it. It is never shown back."
        ),
    )
    forget_hf_token = forms.BooleanField(
        label="Forget the stored Hugging Face token", required=False
    )

    class Meta:
        model = Team
        fields = ["name", "description"]

    def clean_hf_token(self) -> str:
        token = self.cleaned_data.get("hf_token", "")
        if token and hf_token_problem(token):
            raise forms.ValidationError(hf_token_problem(token))  # never repeats the token
        return token

    def save(self, commit: bool = True) -> Any:
        team = super().save(commit=False)
        if self.cleaned_data.get("hf_token"):
            team.set_hf_token(self.cleaned_data["hf_token"])
        elif self.cleaned_data.get("forget_hf_token"):
            team.set_hf_token("")
        if commit:
            team.save()
        return team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    form = TeamAdminForm
    list_display = ["name", "description", "has_hf_token", "created_at"]
    search_fields = ["name", "description"]
    readonly_fields = ["has_hf_token"]
    inlines = [MembershipInline]

    @admin.display(boolean=True, description="Hugging Face token set")
    def has_hf_token(self, team: Team) -> bool:
        return team.has_hf_token


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__name"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Admins may see and revoke keys, never their secrets (only a hash is stored anyway)."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at"]

    def has_add_permission(self, request: object) -> bool:
        return False  # keys are created by their owner, who must see the secret once


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit trail is written by the actions themselves and never edited."""

    list_display = ["at", "actor_name", "action", "target", "team", "message"]
    list_filter = ["action", "team"]
    search_fields = ["actor_name", "target", "message"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(GroupRule)
class GroupRuleAdmin(admin.ModelAdmin):
    """Which provider group gives which role in which team, applied at every single sign-on."""

    list_display = ["group", "team", "role"]
    list_filter = ["role", "team"]
    search_fields = ["group", "team__name"]


@admin.register(SignOnIdentity)
class SignOnIdentityAdmin(admin.ModelAdmin):
    """Written at a person's first single sign-on; deleting one lets the subject start afresh."""

    list_display = ["user", "issuer", "subject", "created_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "created_at"]

    def has_add_permission(self, request: Any) -> bool:
        return False
