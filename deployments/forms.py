"""Forms of the hosting wizard (Where, Review) and of the engine-settings editor.

The forms only read what the operator typed; the actions (deployments/actions.py) decide what is
allowed, and the editor's checks (deployments/engine/) say what will not start.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.db.models import Q, QuerySet

from console.lists import ListFilter, both_ways
from deployments.actions import BULK_ACTIONS
from deployments.choices import (
    DEPLOYMENT_GROUPS,
    NOTIFICATION_SUBSCRIBABLE,
    DeploymentState,
    LogLevel,
    LogPattern,
    LogStream,
)
from deployments.engine import other_flags
from deployments.engine.context import EngineContext
from deployments.engine.settings import CATALOG, without_defaults
from deployments.engine.versions import flag_list
from deployments.engine.warnings import cap_share
from deployments.log_search import LEVELS
from deployments.models import Deployment, LogLine


class WhereForm(forms.Form):
    cluster = forms.TypedChoiceField(coerce=int, label="Cluster")
    variant = forms.TypedChoiceField(
        coerce=int, label="Variant", required=False, widget=forms.RadioSelect
    )
    size = forms.ChoiceField(label="Size of each copy", widget=forms.RadioSelect)
    copies = forms.IntegerField(label="Copies", min_value=1, max_value=1000)

    def __init__(self, *args: Any, clusters: Any, variants: Any, sizes: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].choices = [(c.pk, cluster_label(c)) for c in clusters]
        self.fields["variant"].choices = [(v.pk, variant_label(v)) for v in variants]
        self.fields["size"].choices = sizes


def cluster_label(cluster: Any) -> str:
    return f"{cluster.name} ({cluster.get_state_display().lower()})"


def variant_label(variant: Any) -> str:
    engine = "llama.cpp" if variant.engine == "llamacpp" else "vLLM"
    return f"{variant.name}: {variant.precision}, {variant.format}, on {engine}"


class ReviewForm(forms.Form):
    name = forms.CharField(label="Deployment name", max_length=63)
    chat_name = forms.CharField(label="Offer in chat as", max_length=100, required=False)
    revision = forms.CharField(label="Revision", max_length=100, required=False)
    team = forms.TypedChoiceField(coerce=int, label="Team")
    # Advanced mode: the copies above are the starting number, kept within these bounds.
    autoscale = forms.BooleanField(label="Scale by itself with the load", required=False)
    min_copies = forms.IntegerField(label="Lowest copies", required=False)
    max_copies = forms.IntegerField(label="Highest copies", required=False)
    target_in_flight = forms.FloatField(label="Requests in flight per copy", required=False)
    idle_minutes = forms.IntegerField(
        label="Idle after, minutes",
        required=False,
        help_text="With a lowest of 0: no copies after this long without a request; the next "
        "request starts one.",
    )

    AUTOSCALING_FIELDS = (
        "autoscale",
        "min_copies",
        "max_copies",
        "target_in_flight",
        "idle_minutes",
    )

    def autoscaling(self) -> dict[str, Any] | None:
        """The API's autoscaling object from what was typed (deployments/autoscaling.py checks
        it when Host is pressed); None unless asked for."""
        data = getattr(self, "cleaned_data", {})
        if not data.get("autoscale"):
            return None
        chosen = {name: data.get(name) for name in self.AUTOSCALING_FIELDS[1:]}
        return {name: value for name, value in chosen.items() if value is not None}

    def __init__(self, *args: Any, teams: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t.pk, t.name) for t in teams]
        self.fields["name"].help_text = "Lowercase letters, digits and dashes; shown in lists."
        self.fields["chat_name"].help_text = (
            "The name people pick in the chat and use at the API; leave it empty to serve the "
            "model only at its endpoint."
        )
        self.fields["revision"].help_text = "Optional: a branch, tag or commit on Hugging Face."


# --- the engine-settings editor ------------------------------------------------------------

NOVICE_FIELDS = ("max_model_len", "tool_calling", "thinking")


class EngineSettingsForm(forms.Form):
    """The editor's controls, in operators' words; `settings()` turns them into vLLM settings."""

    max_model_len = forms.IntegerField(
        label="Longest conversation (tokens)", required=False, min_value=16, max_value=10_000_000
    )
    memory_share = forms.DecimalField(
        label="Share of the accelerator's memory (%)",
        required=False,
        min_value=1,
        max_value=100,
        decimal_places=2,
    )
    kv_fp8 = forms.BooleanField(label="8-bit context cache", required=False)
    max_num_seqs = forms.IntegerField(
        label="Requests at once", required=False, min_value=1, max_value=65_536
    )
    max_num_batched_tokens = forms.IntegerField(
        label="Tokens per step", required=False, min_value=1, max_value=10_000_000
    )
    prefix_caching = forms.BooleanField(label="Reuse shared prompt starts", required=False)
    chunked_prefill = forms.BooleanField(label="Split long prompts", required=False)
    tool_calling = forms.BooleanField(label="Tool calling", required=False)
    tool_call_parser = forms.ChoiceField(label="Format", required=False)
    thinking = forms.BooleanField(label="Show its thinking separately", required=False)
    reasoning_parser = forms.ChoiceField(label="Thinking format", required=False)
    embeddings = forms.BooleanField(label="Serve embeddings", required=False)
    enforce_eager = forms.BooleanField(label="Skip graph capture", required=False)
    # Not stripped and without Django's NUL check: the Other flags checks see the text as typed
    # (a trailing line break or a NUL is refused, with their own words, not silently cleaned).
    other_flags = forms.CharField(
        label="Other flags", required=False, strip=False, max_length=other_flags.MAX_CHARACTERS * 2
    )

    def __init__(
        self, *args: Any, context: EngineContext, novice: bool, suggested: dict[str, Any], **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self.context, self.novice, self.suggested = context, novice, suggested
        flags = flag_list(context.version)
        self.fields["tool_call_parser"].choices = [("", "—")] + [
            (p, p) for p in flags.tool_call_parsers
        ]
        self.fields["reasoning_parser"].choices = [("", "off")] + [
            (p, p) for p in flags.reasoning_parsers
        ]
        self.capped = ""
        self.fields["other_flags"].validators = []

    @classmethod
    def initial_from(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The controls for stored settings (defaults where a setting is not stored)."""
        share = settings.get("gpu_memory_utilization")
        return {
            "max_model_len": settings.get("max_model_len"),
            "memory_share": round(Decimal(str(share)) * 100, 2) if share else None,
            "kv_fp8": settings.get("kv_cache_dtype", "auto") != "auto",
            "max_num_seqs": settings.get("max_num_seqs"),
            "max_num_batched_tokens": settings.get("max_num_batched_tokens"),
            "prefix_caching": settings.get("enable_prefix_caching", True),
            "chunked_prefill": settings.get("enable_chunked_prefill", True),
            "tool_calling": settings.get("enable_auto_tool_choice", False),
            "tool_call_parser": settings.get("tool_call_parser", ""),
            "thinking": bool(settings.get("reasoning_parser")),
            "reasoning_parser": settings.get("reasoning_parser", ""),
            "embeddings": settings.get("runner") == "pooling",
            "enforce_eager": settings.get("enforce_eager", False),
            "other_flags": settings.get("other_flags", ""),
        }

    def clean_other_flags(self) -> str:
        text = self.cleaned_data.get("other_flags") or ""
        problems = other_flags.problems(text, flag_list(self.context.version))
        if problems:
            raise forms.ValidationError(problems)
        return text.strip()

    def settings(self, current: dict[str, Any]) -> dict[str, Any]:
        """The stored settings after this form: the controls shown replace their settings, the
        others keep their values (novice mode shows only a few)."""
        data = self.cleaned_data
        values = dict(current)
        if self.novice:
            values.update(self.novice_values(data, current))
        else:
            values.update(self.advanced_values(data))
        return without_defaults({k: v for k, v in values.items() if k in CATALOG})

    def novice_values(self, data: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
        tool_format = current.get("tool_call_parser") or self.suggested.get("tool_call_parser")
        thinking = current.get("reasoning_parser") or self.suggested.get("reasoning_parser")
        return {
            "max_model_len": data.get("max_model_len"),
            "enable_auto_tool_choice": bool(data.get("tool_calling")),
            "tool_call_parser": tool_format if data.get("tool_calling") else None,
            "reasoning_parser": thinking if data.get("thinking") else None,
        }

    def advanced_values(self, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "max_model_len": data.get("max_model_len"),
            "gpu_memory_utilization": self.share(data.get("memory_share")),
            "kv_cache_dtype": "fp8" if data.get("kv_fp8") else None,
            "max_num_seqs": data.get("max_num_seqs"),
            "max_num_batched_tokens": data.get("max_num_batched_tokens"),
            "enable_prefix_caching": bool(data.get("prefix_caching")),
            "enable_chunked_prefill": bool(data.get("chunked_prefill")),
            "enable_auto_tool_choice": bool(data.get("tool_calling")),
            "tool_call_parser": data.get("tool_call_parser") or None,
            "reasoning_parser": data.get("reasoning_parser") or None,
            "runner": "pooling" if data.get("embeddings") else None,
            "enforce_eager": bool(data.get("enforce_eager")),
            "other_flags": data.get("other_flags") or None,
        }

    def share(self, percent: Decimal | None) -> float | None:
        """The memory share as a fraction, capped at what a copy of this size may use."""
        if percent is None:
            return None
        capped, why = cap_share(float(percent) / 100, self.context)
        self.capped = why
        return round(capped, 4) if capped is not None else None


class AutoscalingForm(forms.Form):
    """The deployment page's Autoscaling panel: numbers as typed, read into the API's object
    (deployments/autoscaling.py checks the bounds and says what is wrong)."""

    min_copies = forms.IntegerField()
    max_copies = forms.IntegerField()
    target_in_flight = forms.FloatField(required=False)
    target_ttft_ms = forms.FloatField(required=False)
    up_window_s = forms.IntegerField(required=False)
    down_window_s = forms.IntegerField(required=False)
    idle_minutes = forms.IntegerField(required=False)


class DeploymentFilter(ListFilter):
    """The deployments list's filters and orders (its page and GET /api/v1/deployments)."""

    list_name = "deployments"
    orders = (
        *both_ways("name", "Name", ("name", "pk")),
        *both_ways("created", "Oldest first", ("created_at", "pk")),
        *both_ways("state", "State", ("state", "name", "pk")),
        *both_ways("model", "Model", ("model__name", "name", "pk")),
        *both_ways("cluster", "Cluster", ("cluster__name", "name", "pk")),
        *both_ways("team", "Team", ("team__name", "name", "pk")),
    )

    state = forms.ChoiceField(required=False)
    cluster = forms.IntegerField(required=False, min_value=1)
    model = forms.IntegerField(required=False, min_value=1)
    q = forms.CharField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        groups = [(name, name) for name in DEPLOYMENT_GROUPS]
        self.fields["state"].choices = [("", "any"), *groups, *DeploymentState.choices]

    def filter_state(self, rows: QuerySet[Deployment], state: str) -> QuerySet[Deployment]:
        return rows.filter(state__in=DEPLOYMENT_GROUPS.get(state, {state}))

    def filter_cluster(self, rows: QuerySet[Deployment], cluster: int) -> QuerySet[Deployment]:
        return rows.filter(cluster_id=cluster)

    def filter_model(self, rows: QuerySet[Deployment], model: int) -> QuerySet[Deployment]:
        return rows.filter(model_id=model)

    def filter_q(self, rows: QuerySet[Deployment], query: str) -> QuerySet[Deployment]:
        return rows.filter(Q(name__icontains=query) | Q(chat_name__icontains=query))


class LogFilter(ListFilter):
    """A deployment's log filters: level (and above), stream, machine, pattern, a search, and
    for the API the lines after a seq (to follow a log) and its order (oldest first)."""

    list_name = "logs"
    orders = both_ways("seq", "Oldest first", ("seq", "pk"))

    after = forms.IntegerField(required=False, min_value=0)
    level = forms.ChoiceField(required=False, choices=[("", "any"), *LogLevel.choices])
    stream = forms.ChoiceField(required=False, choices=[("", "any"), *LogStream.choices])
    machine = forms.CharField(required=False)
    pattern = forms.ChoiceField(required=False, choices=LogPattern.choices)
    q = forms.CharField(required=False)

    def filter_level(self, lines: QuerySet[LogLine], level: str) -> QuerySet[LogLine]:
        return lines.filter(level__in=LEVELS[LEVELS.index(level) :])

    def filter_stream(self, lines: QuerySet[LogLine], stream: str) -> QuerySet[LogLine]:
        return lines.filter(stream=stream)

    def filter_machine(self, lines: QuerySet[LogLine], machine: str) -> QuerySet[LogLine]:
        return lines.filter(machine_name=machine)

    def filter_pattern(self, lines: QuerySet[LogLine], pattern: str) -> QuerySet[LogLine]:
        return lines.filter(pattern=pattern)

    def filter_q(self, lines: QuerySet[LogLine], query: str) -> QuerySet[LogLine]:
        return lines.filter(text__icontains=query)

    def filter_after(self, lines: QuerySet[LogLine], seq: int) -> QuerySet[LogLine]:
        return lines.filter(seq__gt=seq)


# A bulk action touches at most this many deployments at once (a page of the list).
BULK_MOST = 200


class SelectedIds(forms.Field):
    """The ids of the rows ticked in a list: whole numbers, each once."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        values = value if isinstance(value, list | tuple) else [value] if value else []
        if not values:
            raise forms.ValidationError("select at least one deployment first.")
        if len(values) > BULK_MOST:
            raise forms.ValidationError(f"select at most {BULK_MOST} deployments at once.")
        if not all(str(v).isdigit() for v in values):
            raise forms.ValidationError("a selected row is not a deployment; reload the list.")
        return sorted({int(v) for v in values})


class BulkForm(forms.Form):
    """The deployments list's bulk bar: an action for the selected rows, then its confirmation."""

    action = forms.ChoiceField(
        choices=[(name, name) for name in BULK_ACTIONS],
        error_messages={
            "required": "choose what to do with the selected deployments.",
            "invalid_choice": f"no such action %(value)s; use one of {', '.join(BULK_ACTIONS)}.",
        },
    )
    selected = SelectedIds()
    confirmed = forms.BooleanField(required=False)


def notice_events_field() -> forms.MultipleChoiceField:
    return forms.MultipleChoiceField(
        choices=[(e.value, e.label) for e in NOTIFICATION_SUBSCRIBABLE],
        widget=forms.CheckboxSelectMultiple,
        label="Tell it when a deployment",
        error_messages={
            "required": "Choose at least one event: failed, degraded or recovered.",
            "invalid_choice": "Unknown event “%(value)s”: choose failed, degraded or recovered.",
        },
    )


class WebhookForm(forms.Form):
    """A new webhook as typed; notifications.add_webhook checks the address and the role."""

    name = forms.CharField(max_length=100, label="Name")
    url = forms.CharField(max_length=2000, label="URL (https://…)")
    events = notice_events_field()
    allow_private = forms.BooleanField(required=False, label="Allow private addresses")


class EmailRecipientForm(forms.Form):
    """A new e-mail address as typed; notifications.add_email checks it and the role."""

    address = forms.CharField(max_length=254, label="E-mail address")
    events = notice_events_field()
