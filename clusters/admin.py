from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from clusters.models import Accelerator, Cluster, ClusterKind, Machine
from console import audit


def check_kubeconfig(text: str, namespace: str) -> str | None:
    """None when Berth can reach the cluster with this kubeconfig, else what is wrong."""
    from clusters.backends.kubernetes import test_connection, validate_kubeconfig

    problem = validate_kubeconfig(text)
    if problem:
        return problem
    check = test_connection(text, namespace)
    return None if check.ok else check.message


class WriteOnlyTextarea(forms.Textarea):
    """Never renders a value back, not even what was just submitted with an error."""

    def format_value(self, value: Any) -> str | None:
        return None


class ClusterAdminForm(forms.ModelForm):
    """The kubeconfig is write-only: checked against the cluster, stored encrypted, never shown."""

    kubeconfig = forms.CharField(
        widget=WriteOnlyTextarea(attrs={"rows": 4, "autocomplete": "off"}),
        required=False,
        strip=False,
        help_text=(
            "Paste a kubeconfig to replace the stored one; leave empty to keep it. "
            "Berth connects with it before saving. It is never shown back."
        ),
    )

    class Meta:
        model = Cluster
        fields = [
            "name",
            "description",
            "kind",
            "topology",
            "namespace",
            "engine_image",
            "engine_version",
            "sharing_strategy",
            "simulated_inventory",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("kind") != ClusterKind.KUBERNETES:
            return data
        text = data.get("kubeconfig") or ""
        if not text and not (self.instance.pk and self.instance.has_kubeconfig):
            self.add_error("kubeconfig", "A Kubernetes cluster needs a kubeconfig: paste one.")
        elif text:
            problem = check_kubeconfig(text, data.get("namespace") or "berth")
            if problem:
                self.add_error("kubeconfig", problem)
        return data

    def save(self, commit: bool = True) -> Cluster:
        cluster = super().save(commit=False)
        if self.cleaned_data.get("kubeconfig"):
            cluster.set_kubeconfig(self.cleaned_data["kubeconfig"])
        if commit:
            cluster.save()
        return cluster


class MachineInline(admin.TabularInline):
    model = Machine
    extra = 0
    fields = ["name", "ready", "cpu_count", "system_memory_bytes", "unified_memory", "last_seen"]
    readonly_fields = ["last_seen"]


@admin.action(description="Test connection")
def test_connection_action(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Cluster]
) -> None:
    from clusters.backends.kubernetes import test_connection

    for cluster in queryset:
        if cluster.kind != ClusterKind.KUBERNETES:
            modeladmin.message_user(
                request, f"{cluster}: not a Kubernetes cluster; nothing to test."
            )
            continue
        check = test_connection(cluster.kubeconfig(), cluster.namespace)
        audit.record(request.user, audit.CLUSTER_CHECKED, f"cluster {cluster}", check.message)
        level = messages.SUCCESS if check.ok else messages.ERROR
        modeladmin.message_user(request, f"{cluster}: {check.message}", level)


@admin.action(description="Refresh machines and GPUs now")
def refresh_action(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
    from clusters.inventory import refresh

    for cluster in queryset:
        discovery = refresh(cluster)
        words = discovery.message or "refreshed"
        audit.record(request.user, audit.CLUSTER_REFRESHED, f"cluster {cluster}", words)
        modeladmin.message_user(request, f"{cluster}: {words}")


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterAdminForm
    list_display = ["name", "kind", "topology", "state", "sharing_strategy", "last_seen"]
    list_filter = ["kind", "state", "sharing_strategy"]
    search_fields = ["name", "description"]
    readonly_fields = ["state", "notices", "discovery_message", "last_seen", "has_kubeconfig"]
    inlines = [MachineInline]
    actions = [test_connection_action, refresh_action]


@admin.register(Machine)
class MachineAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "ready", "cpu_count", "system_memory_bytes", "last_seen"]
    list_filter = ["cluster", "ready", "unified_memory"]
    search_fields = ["name", "cluster__name"]


@admin.register(Accelerator)
class AcceleratorAdmin(admin.ModelAdmin):
    list_display = [
        "__str__",
        "vendor",
        "product",
        "memory_bytes",
        "compute_capability",
        "hardware_class",
        "sharing_class",
        "replicas",
        "present",
    ]
    list_filter = ["vendor", "hardware_class", "sharing_class", "present", "machine__cluster"]
    search_fields = ["product", "uuid", "machine__name"]
    raw_id_fields = ["machine", "parent"]
