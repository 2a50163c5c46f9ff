"""The catalog's forms: marketplace filters, adding a model, and asking for a download."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import Q, QuerySet

from catalog import hub
from catalog.models import Model, ServerModel, ServerModelState, Task, Variant
from console.access import operated_teams
from console.lists import ListFilter, both_ways, choices_of
from console.models import Team
from placement.words import gib

HF_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/")
SIZES = {
    "small": (0, 10_000_000_000),
    "medium": (10_000_000_000, 40_000_000_000),
    "large": (40_000_000_000, None),
}


def blank(label: str) -> list[tuple[str, str]]:
    return [("", label)]


class MarketplaceFilter(ListFilter):
    """Search, filters and orders (the marketplace and GET /api/v1/models); on the page a bad
    value is reported and that filter left out."""

    list_name = "models"
    orders = (
        *both_ways("name", "Name", ("name", "pk")),
        *both_ways("size", "Size", ("params_total", "name", "pk")),
        *both_ways("family", "Family", ("family", "name", "pk")),
    )

    q = forms.CharField(required=False, max_length=100, label="Search")
    family = forms.ChoiceField(required=False)
    size = forms.ChoiceField(
        required=False,
        choices=blank("Any size")
        + [("small", "Under 10 B"), ("medium", "10–40 B"), ("large", "Over 40 B")],
    )
    task = forms.ChoiceField(required=False, choices=blank("Any task") + list(Task.choices))
    format = forms.ChoiceField(
        required=False,
        choices=blank("Any format") + [("safetensors", "safetensors"), ("gguf", "GGUF")],
    )
    license = forms.ChoiceField(required=False, label="Licence")
    gated = forms.ChoiceField(
        required=False,
        choices=blank("Gated or not") + [("no", "Not gated"), ("yes", "Gated")],
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["family"].choices = blank("Any family") + choices_of(Model.objects, "family")
        self.fields["license"].choices = blank("Any licence") + choices_of(Model.objects, "license")

    def apply(self, rows: QuerySet[Model]) -> QuerySet[Model]:
        return super().apply(rows).distinct()  # a model matches once, whatever its variants

    def filter_q(self, models: QuerySet[Model], q: str) -> QuerySet[Model]:
        return models.filter(
            Q(name__icontains=q) | Q(repo_id__icontains=q) | Q(family__icontains=q)
        )

    def filter_size(self, models: QuerySet[Model], size: str) -> QuerySet[Model]:
        low, high = SIZES[size]
        models = models.filter(params_total__gte=low)
        return models.filter(params_total__lt=high) if high else models

    def filter_family(self, models: QuerySet[Model], family: str) -> QuerySet[Model]:
        return models.filter(family=family)

    def filter_license(self, models: QuerySet[Model], license: str) -> QuerySet[Model]:
        return models.filter(license=license)

    def filter_format(self, models: QuerySet[Model], format: str) -> QuerySet[Model]:
        return models.filter(variants__format=format)

    def filter_task(self, models: QuerySet[Model], task: str) -> QuerySet[Model]:
        return models.filter(tasks__contains=[task])

    def filter_gated(self, models: QuerySet[Model], gated: str) -> QuerySet[Model]:
        return models.filter(gated=gated == "yes")


class ModelListFilter(MarketplaceFilter):
    """GET /api/v1/models: the marketplace's filters, and ?repo_id= to find one model by its
    repository id exactly (the page has search for that; one nobody has lists nothing)."""

    repo_id = forms.CharField(required=False, max_length=200)

    def filter_repo_id(self, models: QuerySet[Model], repo_id: str) -> QuerySet[Model]:
        return models.filter(repo_id=repo_id)


def clean_revision(value: str) -> str:
    value = (value or "").strip()
    if value and not hub.valid_revision(value):
        raise forms.ValidationError(
            "A revision is a branch, tag or commit: letters, digits, “.”, “_”, “-” and “/”."
        )
    return value


class TeamTokenMixin(forms.Form):
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(),
        required=False,
        empty_label="No team (public models only)",
        help_text="Its Hugging Face token is used for gated models.",
    )

    def set_teams(self, user: Any) -> None:
        teams = operated_teams(user)
        field = self.fields["team"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = teams
        if len(teams) == 1:
            field.initial = teams[0].pk


class AddFromHubForm(TeamTokenMixin):
    repo_id = forms.CharField(
        max_length=200,
        label="Hugging Face repository",
        help_text="owner/name, e.g. Qwen/Qwen3-8B",
    )
    revision = forms.CharField(
        max_length=100, required=False, help_text="Branch, tag or commit; empty for main."
    )
    field_order = ["repo_id", "revision", "team"]

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_teams(user)

    def clean_repo_id(self) -> str:
        value = self.cleaned_data["repo_id"].strip().strip("/")
        for prefix in HF_PREFIXES:  # a pasted address works too
            value = value.removeprefix(prefix)
        if not hub.valid_repo_id(value):
            raise forms.ValidationError("Give the repository as owner/name, e.g. Qwen/Qwen3-8B.")
        if Model.objects.filter(repo_id__iexact=value).exists():
            raise forms.ValidationError(f"{value} is already in the catalog.")
        return value

    def clean_revision(self) -> str:
        return clean_revision(self.cleaned_data.get("revision", ""))


class AddFromPathForm(forms.Form):
    path = forms.CharField(
        max_length=500,
        label="Path on this server",
        help_text="A folder with config.json and safetensors or GGUF files.",
    )
    repo_id = forms.CharField(
        max_length=200,
        required=False,
        label="Name in the catalog",
        help_text="owner/name; empty: local/<folder name>",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Its ids differ from the hub form's on the same page, so each label points at its field.
        kwargs.setdefault("auto_id", "id_from_path_%s")
        super().__init__(*args, **kwargs)

    def clean_repo_id(self) -> str:
        value = self.cleaned_data.get("repo_id", "").strip()
        if value and not hub.valid_repo_id(value):
            raise forms.ValidationError("Give the name as owner/name, e.g. local/my-model.")
        if value and Model.objects.filter(repo_id__iexact=value).exists():
            raise forms.ValidationError(f"{value} is already in the catalog.")
        return value


class VariantChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.name} ({obj.format}, {gib(obj.size_bytes)})"


class DownloadForm(TeamTokenMixin):
    variant = VariantChoice(queryset=Variant.objects.none(), empty_label=None)
    revision = forms.CharField(
        max_length=100, required=False, help_text="Branch, tag or commit; empty for main."
    )
    field_order = ["variant", "revision", "team"]

    def __init__(self, *args: Any, user: Any, model: Model, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        variant = self.fields["variant"]
        assert isinstance(variant, forms.ModelChoiceField)
        variant.queryset = model.variants.all()
        self.set_teams(user)

    def clean_revision(self) -> str:
        return clean_revision(self.cleaned_data.get("revision", ""))


class ServerModelFilter(ListFilter):
    """On this server's filters and orders."""

    list_name = "server models"
    orders = (
        *both_ways("model", "Model", ("variant__model__name", "variant__name", "pk")),
        *both_ways("size", "Size on disk", ("size_bytes", "pk")),
        *both_ways("state", "State", ("state", "variant__model__name", "pk")),
    )

    state = forms.ChoiceField(required=False, choices=blank("any") + list(ServerModelState.choices))
    q = forms.CharField(required=False, max_length=100, label="Search")

    def filter_state(self, rows: QuerySet[ServerModel], state: str) -> QuerySet[ServerModel]:
        return rows.filter(state=state)

    def filter_q(self, rows: QuerySet[ServerModel], query: str) -> QuerySet[ServerModel]:
        return rows.filter(
            Q(variant__model__name__icontains=query) | Q(variant__model__repo_id__icontains=query)
        )
