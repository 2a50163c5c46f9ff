"""Deployments in the Django admin: states, reservations and secrets are never edited here."""

from typing import Any

from django.contrib import admin

from deployments.models import Copy, Deployment, Event, LogLine, Reservation


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "state",
        "team",
        "model",
        "variant",
        "cluster",
        "copies_wanted",
        "chat_name",
    ]
    list_filter = ["state", "team", "cluster", "engine"]
    search_fields = ["name", "chat_name", "model__name", "last_message"]
    readonly_fields = [
        "state",
        "notices",
        "last_message",
        "last_checked_at",
        "last_error_code",
        "last_error_message",
        "last_error_at",
        "created_by",
        "created_at",
    ]

    def has_add_permission(self, request: Any) -> bool:
        return False  # deployments are hosted through the console, which places them


@admin.register(Copy)
class CopyAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "state", "machine", "allocated_bytes", "attempts", "last_error_code"]
    list_filter = ["state", "deployment__cluster", "last_error_code"]
    search_fields = ["deployment__name", "pod_name"]
    exclude = ["engine_api_key_encrypted"]


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    list_display = ["copy", "machine", "accelerator", "reserved_bytes", "share", "resource_name"]
    list_filter = ["machine__cluster"]
    search_fields = ["copy__deployment__name", "machine__name"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = [
        "at",
        "deployment_name",
        "kind",
        "from_state",
        "to_state",
        "actor_name",
        "message",
    ]
    list_filter = ["kind", "to_state"]
    search_fields = ["deployment_name", "message", "actor_name"]


@admin.register(LogLine)
class LogLineAdmin(ReadOnlyAdmin):
    list_display = ["deployment", "seq", "at", "stream", "level", "pattern", "text"]
    list_filter = ["stream", "level", "pattern"]
    search_fields = ["text", "deployment__name"]
