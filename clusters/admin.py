from django import forms
from django.contrib import admin

from clusters.models import Accelerator, Cluster, Machine


class ClusterAdminForm(forms.ModelForm):
    """The kubeconfig is write-only: it is stored encrypted and never shown back."""

    kubeconfig = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        strip=False,
        help_text=(
            "Paste a kubeconfig to replace the stored one; leave empty to keep it. "
            "It is never shown back."
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


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterAdminForm
    list_display = ["name", "kind", "topology", "state", "sharing_strategy", "last_seen"]
    list_filter = ["kind", "state", "sharing_strategy"]
    search_fields = ["name", "description"]
    readonly_fields = ["state", "notices", "last_seen", "has_kubeconfig"]
    inlines = [MachineInline]


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
    ]
    list_filter = ["vendor", "hardware_class", "sharing_class", "machine__cluster"]
    search_fields = ["product", "uuid", "machine__name"]
    raw_id_fields = ["machine", "parent"]
