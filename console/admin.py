from django.contrib import admin

from console.models import ApiKey, Membership, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "created_at"]
    search_fields = ["name", "description"]
    inlines = [MembershipInline]


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
