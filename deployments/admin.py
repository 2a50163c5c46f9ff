"""Deployments in the Django admin: states, reservations and secrets are never edited here."""

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from deployments import actions
from deployments.models import (
    Copy,
    CopyMove,
    Deployment,
    Event,
    HeldRoom,
    LogLine,
    MachineFiles,
    Reservation,
    Revision,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyAdmin):
    """Read only: a change goes through the console's actions (validation, an Event, a
    converge), so the admin offers those actions, run as the staff user; no field is edited and
    no row deleted here (a deletion would orphan running engines and hand their room out)."""

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
    exclude = ["engine_settings"]  # shown with the other fields, as stored, below
    readonly_fields = ["engine_settings_shown"]
    actions = ["stop_selected", "start_selected", "check_now_selected", "delete_selected_safely"]

    @admin.display(description="engine settings")
    def engine_settings_shown(self, deployment: Deployment) -> str:
        return str(deployment.engine_settings or "the defaults")

    def run_each(self, request: Any, queryset: Any, action: Any, done: str) -> None:
        for deployment in queryset:
            try:
                action(request.user, deployment)
            except actions.ActionRefused as refused:
                self.message_user(request, f"{deployment.name}: {refused}", messages.WARNING)
            else:
                self.message_user(request, f"{deployment.name}: {done}.")

    @admin.action(description="Stop the selected deployments")
    def stop_selected(self, request: Any, queryset: Any) -> None:
        self.run_each(request, queryset, actions.stop, "stopping")

    @admin.action(description="Start the selected deployments")
    def start_selected(self, request: Any, queryset: Any) -> None:
        self.run_each(request, queryset, actions.start, "starting")

    @admin.action(description="Check the selected deployments now")
    def check_now_selected(self, request: Any, queryset: Any) -> None:
        self.run_each(request, queryset, actions.check_now, "checked")

    @admin.action(description="Delete the selected deployments (their copies are stopped first)")
    def delete_selected_safely(self, request: Any, queryset: Any) -> None:
        self.run_each(request, queryset, actions.delete, "deleted once its copies have stopped")


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


@admin.register(HeldRoom)
class HeldRoomAdmin(ReadOnlyAdmin):
    """What each reservation held and when, the record cost accrues from: to read, not edit."""

    list_display = [
        "deployment_name",
        "copy_ordinal",
        "product",
        "gpus",
        "cores",
        "held_from",
        "held_until",
    ]
    list_filter = ["vendor", "team"]
    search_fields = ["deployment_name", "product"]


@admin.register(CopyMove)
class CopyMoveAdmin(ReadOnlyAdmin):
    """Re-packing moves, as the console runs them (deployments/moving.py): to read, not edit."""

    list_display = ["created_at", "cluster", "deployment", "position", "state", "to_machine",
                    "why", "message"]  # fmt: skip
    list_filter = ["state", "cluster"]
    search_fields = ["deployment__name", "plan", "why"]


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


@admin.register(Revision)
class RevisionAdmin(ReadOnlyAdmin):
    """Revisions are kept by the actions that make the changes: to read; a rollback is an
    action on the deployment's Revisions tab."""

    list_display = ["deployment", "number", "at", "actor_name", "outcome", "why", "comment"]
    list_filter = ["outcome"]
    search_fields = ["deployment__name", "why", "comment", "actor_name"]


@admin.register(LogLine)
class LogLineAdmin(ReadOnlyAdmin):
    list_display = ["deployment", "seq", "at", "stream", "level", "pattern", "text"]
    list_filter = ["stream", "level", "pattern"]
    search_fields = ["text", "deployment__name"]


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
