from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from clusters.backends.ray.dashboard import RayCheck
from clusters.models import Accelerator, Cluster, ClusterKind, Machine, Price
from console import audit


def check_kubeconfig(text: str, namespace: str) -> str | None:
    """None when Berth can reach the cluster with this kubeconfig, else what is wrong."""
    from clusters.backends.kubernetes import test_connection, validate_kubeconfig

    problem = validate_kubeconfig(text)
    if problem:
        return problem
    check = test_connection(text, namespace)
    return None if check.ok else check.message


def check_ray(address: str, token: str) -> RayCheck:
    """Whether Berth can work with the Ray cluster at this address, and its dashboard's."""
    from clusters.backends.ray import RayNotInstalled, check_cluster

    try:
        return check_cluster(address, token)
    except RayNotInstalled as missing:
        return RayCheck(False, str(missing))


def gpu_memory_problem(declared: Any) -> str | None:
    """The GPU memory per accelerator type must be {"TYPE": GiB, …}."""
    from clusters.backends.ray.dashboard import LARGEST_GPU_GIB

    if not isinstance(declared, dict):
        return 'give an object of accelerator type to GiB, e.g. {"H100": 80}'
    for kind, gib in declared.items():
        number = isinstance(gib, int | float) and not isinstance(gib, bool)
        if not kind.strip() or not number or not 0 < gib <= LARGEST_GPU_GIB:
            return (
                f"{kind!r}: {gib!r} is not a GPU memory: a number of GiB above 0, at most "
                f"{LARGEST_GPU_GIB}"
            )
    return None


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

    ray_token = forms.CharField(
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        required=False,
        strip=True,
        help_text=(
            "A Ray cluster that requires a token: paste it to replace the stored one; leave "
            "empty to keep it. Never shown back."
        ),
    )

    class Meta:
        model = Cluster
        fields = [
            "name",
            "description",
            "kind",
            "topology",
            "address",
            "gpu_memory_gib",
            "simulated_engines",
            "namespace",
            "engine_image",
            "engine_version",
            "sharing_strategy",
            "repack_policy",
            "consolidate_window",
            "consolidate_above_percent",
            "consolidate_below_load",
            "simulated_inventory",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("kind") == ClusterKind.RAY:
            self.clean_ray(data)
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

    def clean_ray(self, data: dict[str, Any]) -> None:
        """Connects before saving: the versions must match and the dashboard must answer."""
        problem = gpu_memory_problem(data.get("gpu_memory_gib") or {})
        if problem:
            self.add_error("gpu_memory_gib", problem)
        address = (data.get("address") or "").strip()
        if not address:
            self.add_error("address", "A Ray cluster needs its address, e.g. HEAD:6379.")
            return
        token = data.get("ray_token") or (self.instance.ray_token() if self.instance.pk else "")
        check = check_ray(address, token)
        if not check.ok:
            self.add_error("address", check.message)
        self.dashboard_url = check.dashboard_url

    def save(self, commit: bool = True) -> Cluster:
        cluster = super().save(commit=False)
        if self.cleaned_data.get("kubeconfig"):
            cluster.set_kubeconfig(self.cleaned_data["kubeconfig"])
        if self.cleaned_data.get("ray_token"):
            cluster.set_ray_token(self.cleaned_data["ray_token"])
        if getattr(self, "dashboard_url", ""):
            cluster.dashboard_url = self.dashboard_url
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
        if cluster.kind == ClusterKind.RAY:
            ray_check = check_ray(cluster.address, cluster.ray_token())
            ok, words = ray_check.ok, ray_check.message
        elif cluster.kind == ClusterKind.KUBERNETES:
            check = test_connection(cluster.kubeconfig(), cluster.namespace)
            ok, words = check.ok, check.message
        else:
            modeladmin.message_user(
                request, f"{cluster}: neither a Kubernetes nor a Ray cluster; nothing to test."
            )
            continue
        audit.record(request.user, audit.CLUSTER_CHECKED, f"cluster {cluster}", words)
        level = messages.SUCCESS if ok else messages.ERROR
        modeladmin.message_user(request, f"{cluster}: {words}", level)


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
    list_display = ["name", "kind", "topology", "state", "sharing_strategy", "repack_policy",
                    "last_seen"]  # fmt: skip
    list_filter = ["kind", "state", "sharing_strategy", "repack_policy"]
    search_fields = ["name", "description"]
    readonly_fields = [
        "state",
        "notices",
        "discovery_message",
        "last_seen",
        "has_kubeconfig",
        "has_ray_token",
        "dashboard_url",
    ]
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


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    """What an hour of a GPU of one product, or of a CPU core, costs (gateway/cost.py)."""

    list_display = ["__str__", "unit", "product", "per_hour", "currency", "updated_at"]
    list_filter = ["unit"]
    search_fields = ["product"]
