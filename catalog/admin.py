from django.contrib import admin
from django.http import HttpRequest

from catalog.models import MachineFiles, Model, ServerModel, Variant


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
    """Downloads change state only through catalog/downloads.py (the pages' actions)."""

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


@admin.register(MachineFiles)
class MachineFilesAdmin(admin.ModelAdmin):
    """What Sync and the copies' starts found on each machine: read only (Sync is on the
    deployment's page, and it alone changes these rows)."""

    list_display = ["__str__", "state", "revision", "size_bytes", "checked_at", "updated_at"]
    list_filter = ["state", "machine__cluster"]
    search_fields = ["variant__model__name", "machine__name", "revision"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
