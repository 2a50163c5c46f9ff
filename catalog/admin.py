from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from catalog.models import CodeTrust, Model, ServerModel, Variant
from catalog.trust import trust, withdraw


class VariantInline(admin.TabularInline):
    model = Variant
    extra = 0


@admin.register(Model)
class ModelAdmin(admin.ModelAdmin):
    list_display = ["name", "repo_id", "family", "params_total", "max_context", "license", "gated"]
    list_filter = ["family", "gated", "license", "encoder_only"]
    search_fields = ["name", "repo_id", "family", "architecture"]
    inlines = [VariantInline]


@admin.register(Variant)
class VariantAdmin(admin.ModelAdmin):
    list_display = [
        "__str__",
        "precision",
        "format",
        "size_bytes",
        "size_estimated",
        "engine",
        "min_compute_capability",
    ]
    list_filter = ["format", "engine", "precision", "size_estimated"]
    search_fields = ["model__name", "model__repo_id", "repo_id"]


@admin.register(ServerModel)
class ServerModelAdmin(admin.ModelAdmin):
    """Downloads change state only through catalog/downloads.py (the pages' actions); their
    files are deleted on the On this server page, which refuses while a deployment uses them."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    list_display = ["__str__", "state", "size_bytes", "path", "team", "updated_at"]
    list_filter = ["state"]
    search_fields = ["variant__model__name", "path", "revision"]
    readonly_fields = [
        "state",
        "revision",
        "size_bytes",
        "progress_bytes",
        "bytes_per_s",
        "files",
        "error",
        "started_at",
        "finished_at",
    ]


@admin.register(CodeTrust)
class CodeTrustAdmin(admin.ModelAdmin):
    """Trust is given and withdrawn only by these actions, which record who and when."""

    list_display = ["__str__", "trusted_by", "trusted_at", "asked_by", "asked_at"]
    list_filter = [("trusted_at", admin.EmptyFieldListFilter)]
    search_fields = ["model__repo_id", "revision"]
    readonly_fields = ["asked_by", "asked_at", "trusted_by", "trusted_at"]
    actions = ["trust_code", "withdraw_trust"]

    def get_actions(self, request: HttpRequest) -> dict:
        found = super().get_actions(request)
        found.pop("delete_selected", None)  # withdraw instead: the row keeps the record
        return found

    @admin.action(description="Trust the code of the selected models (their copies run it)")
    def trust_code(self, request: HttpRequest, queryset) -> None:
        for row in queryset:
            trust(row.model, row.revision, request.user)
        self.message_user(request, f"Trusted the code of {queryset.count()} model revision(s).")

    @admin.action(description="Withdraw trust in the code of the selected models")
    def withdraw_trust(self, request: HttpRequest, queryset) -> None:
        for row in queryset:
            withdraw(row, request.user)
        self.message_user(request, f"Withdrew trust in {queryset.count()} model revision(s).")
