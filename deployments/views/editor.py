"""The engine-settings editor: one editor for the hosting wizard and for a deployment's page.

It reads the controls into the flat settings a deployment stores, applies a preset ("Tuned for")
to the settings it is about, and shows what the settings mean before they are saved: warnings
for settings that will not start, the exact argv the launcher builds, and every flag of the
cluster's vLLM version. Saving on a deployment goes through actions.change_settings, which
replaces the copies one generation after the other.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.contrib import messages
from django.forms import BooleanField, BoundField
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from catalog import trust
from catalog.models import Model, Variant
from clusters.models import Cluster
from console.access import NEEDS_OPERATE
from deployments import actions, launching
from deployments.access import get_deployment
from deployments.choices import DEPLOYMENT_STOPPING_OR_STOPPED
from deployments.engine import presets, reviewed, suggestions
from deployments.engine.argv import LaunchFacts, cpu_threads, preview_argv
from deployments.engine.context import EngineContext
from deployments.engine.settings import CATALOG, EngineSettingsError, validate_settings
from deployments.engine.variant_advice import hardware_of
from deployments.engine.versions import FlagSpec, flag_list, version_for
from deployments.engine.warnings import EngineWarning, warnings_for
from deployments.forms import EngineSettingsForm
from deployments.models import Deployment
from deployments.placing import cpu_kv_cache_bytes, fit_check, placement_request
from placement.words import percent

MODE_KEY = "berth_editor_mode"
MODES = ("novice", "advanced")
GROUPS = [
    ("Context and memory", ["max_model_len", "memory_share", "kv_fp8"]),
    ("Throughput", ["max_num_seqs", "max_num_batched_tokens", "prefix_caching", "chunked_prefill"]),
    ("What it can do", ["tool_calling", "tool_call_parser", "reasoning_parser", "embeddings"]),
    ("Compatibility", ["enforce_eager"]),
]
NOVICE_GROUPS = [
    ("Context", ["max_model_len"]),
    ("What it can do", ["tool_calling", "thinking"]),
]
# Which stored setting each control changes, to mark what a preset changed.
CONTROL_OF = {
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "memory_share",
    "kv_cache_dtype": "kv_fp8",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_prefix_caching": "prefix_caching",
    "enable_chunked_prefill": "chunked_prefill",
    "enable_auto_tool_choice": "tool_calling",
    "tool_call_parser": "tool_call_parser",
    "reasoning_parser": "reasoning_parser",
    "runner": "embeddings",
    "enforce_eager": "enforce_eager",
}
NOVICE_CONTROL_OF = {"tool_call_parser": "tool_calling", "reasoning_parser": "thinking"}
# Controls the CPU build has no use for: Berth sizes its cache from the copy's budget
# (--kv-cache-memory-bytes), and it never receives --gpu-memory-utilization.
CUDA_ONLY_CONTROLS = {"memory_share"}
FLAG_LIST_LIMIT = 400


def mode_of(request: HttpRequest) -> str:
    """Novice or advanced, remembered in the user's session (no extra cookie, no table)."""
    mode = request.session.get(MODE_KEY, "novice")
    return mode if mode in MODES else "novice"


@dataclass
class Where:
    """Where the settings will run: enough to build an EngineContext and the preview."""

    model: Model
    variant: Variant
    cluster: Cluster | None
    size: float
    served_name: str
    revision: str = ""
    model_reference: str = ""  # what the engine loads; "" → the repository id
    gguf_path: str = ""  # llama.cpp's file; "" → the repository id / the variant's file
    # The revision as asked for (a code trust is per asked revision); None → `revision`.
    asked_revision: str | None = None

    @property
    def code_revision(self) -> str:
        return self.revision if self.asked_revision is None else self.asked_revision

    def context(self) -> EngineContext:
        hardware = hardware_of(self.cluster) if self.cluster else None
        return EngineContext(
            model=self.model,
            variant=self.variant,
            version=version_for(self.cluster.engine_version if self.cluster else ""),
            size=self.size,
            gpu_memory_bytes=hardware.gpu_memory_bytes if hardware else None,
            gpu_product=hardware.product if hardware else "",
            on_cpu=bool(hardware and hardware.cpu),
        )


@dataclass
class Control:
    field: BoundField
    why: str
    warnings: list[str]
    changed: bool
    checkbox: bool


@dataclass
class EditorState:
    """Everything the editor's templates show."""

    where: Where
    context: EngineContext
    settings: dict[str, Any]
    form: EngineSettingsForm
    mode: str
    preset_changed: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def novice(self) -> bool:
        return self.mode == "novice"

    @cached_property
    def suggestions(self) -> list[suggestions.Suggestion]:
        return suggestions.suggest(self.context)

    @cached_property
    def warnings(self) -> list[EngineWarning]:
        return warnings_for(self.settings, self.context)

    @cached_property
    def code_trusted(self) -> bool:
        return trust.is_trusted(self.where.model, self.where.code_revision)

    @cached_property
    def code_trust_words(self) -> str:
        return trust.status_words(self.where.model, self.where.code_revision)

    @cached_property
    def needs_own_code(self) -> str:
        return suggestions.needs_own_code(self.context)

    def control_for(self, setting: str) -> str:
        """The control that shows a setting (novice mode folds the formats into switches)."""
        if self.novice:
            setting = NOVICE_CONTROL_OF.get(setting, setting)
        return CONTROL_OF.get(setting, setting)

    def warnings_by_control(self) -> dict[str, list[str]]:
        shown: dict[str, list[str]] = {}
        for warning in self.warnings:
            shown.setdefault(self.control_for(warning.setting), []).append(warning.message)
        return shown

    @cached_property
    def preview(self) -> list[str]:
        return preview_for(self.where, self.context, self.settings)

    @property
    def preview_text(self) -> str:
        return " ".join(shlex.quote(item) for item in self.preview)

    @property
    def presets(self) -> list[presets.Preset]:
        return list(presets.PRESETS.values())

    def sections(self) -> list[tuple[str, list[Control]]]:
        """The groups of controls shown in this mode, each control with its suggestion, its
        warnings and whether the last preset changed it."""
        chosen = self.novice_groups() if self.novice else GROUPS
        if self.context.engine == "llamacpp":
            chosen = [("Context and throughput", ["max_model_len", "max_num_seqs"])]
        if self.context.on_cpu:
            chosen = [
                (title, [n for n in names if n not in CUDA_ONLY_CONTROLS])
                for title, names in chosen
            ]
        why = self.suggestion_by_control()
        warned = self.warnings_by_control()
        changed = self.changed_controls()
        return [
            (
                title,
                [
                    Control(
                        self.form[name],
                        why.get(name, ""),
                        warned.get(name, []),
                        name in changed,
                        isinstance(self.form.fields[name], BooleanField),
                    )
                    for name in names
                ],
            )
            for title, names in chosen
        ]

    def novice_groups(self) -> list[tuple[str, list[str]]]:
        """Novice mode offers tool calling and thinking only where a format is known for the
        model: there is nothing to choose otherwise."""
        known = {**self.form.suggested, **self.settings}
        offered = {
            "tool_calling": bool(known.get("tool_call_parser")),
            "thinking": bool(known.get("reasoning_parser")),
        }
        groups = []
        for title, names in NOVICE_GROUPS:
            shown = [name for name in names if offered.get(name, True)]
            groups += [(title, shown)] if shown else []
        return groups

    def tuned_for(self) -> str:
        """The preset the settings match now ("" for settings of one's own)."""
        return presets.matching(self.settings, self.context)

    def default_share_text(self) -> str:
        return percent(self.context.default_share())

    def share_limit_text(self) -> str:
        return percent(self.context.share_limit())

    def changed_controls(self) -> set[str]:
        return {CONTROL_OF.get(name, name) for name in self.preset_changed}

    def changed_labels(self) -> list[str]:
        return [CATALOG[name].label for name in self.preset_changed if name in CATALOG]

    def suggestion_by_control(self) -> dict[str, str]:
        return {self.control_for(s.setting): s.why for s in self.suggestions}

    def flags(self, query: str) -> list[tuple[FlagSpec, str]]:
        """The flags matching `query`, each with whether and how it may be typed here."""
        found = flag_list(self.context.version).search(query)[:FLAG_LIST_LIMIT]
        return [(spec, reviewed.summary(spec.name)) for spec in found]


def most_cores(cluster: Cluster | None) -> int:
    """The cores of the cluster's largest ready machine: where a CPU copy's threads come from."""
    if cluster is None:
        return 1
    counts = cluster.machines.filter(ready=True).values_list("cpu_count", flat=True)
    return max(counts, default=1)


def cpu_preview_cache_bytes(where: Where, context: EngineContext, settings: dict[str, Any]) -> int:
    """The cache a copy of this size gets on a CPU machine: its share of the machine's budget,
    less what the launcher counts (placing.cpu_kv_cache_bytes)."""
    if not context.on_cpu or not context.gpu_memory_bytes:
        return 0
    budget = int(min(where.size, 1.0) * context.gpu_memory_bytes)
    try:
        return cpu_kv_cache_bytes(where.model, where.variant, settings, budget)
    except ValueError:  # settings placement cannot read: the preview says so below
        return 0


def preview_for(where: Where, context: EngineContext, settings: dict[str, Any]) -> list[str]:
    """The argv the launcher will build for a copy, from the same argv function."""
    facts = LaunchFacts(
        model=where.model_reference or where.model.repo_id,
        served_name=where.served_name,
        port=8000,
        gpu_memory_utilization=context.share(settings),
        tensor_parallel=context.tensor_parallel,
        revision=where.revision,
        on_cpu=context.on_cpu,
        cpu_threads=cpu_threads(where.size, most_cores(where.cluster)) if context.on_cpu else 0,
        kv_cache_bytes=cpu_preview_cache_bytes(where, context, settings),
        engine_version=context.version,
        trust_remote_code=trust.is_trusted(where.model, where.code_revision),
    )
    try:
        gguf = where.gguf_path or f"{where.model.repo_id}/{where.variant.gguf_file}"
        return preview_argv(settings, facts, context.engine, gguf)
    except EngineSettingsError as error:
        return [f"(not valid: {error})"]


def build_state(
    where: Where,
    settings: dict[str, Any],
    mode: str,
    data: Any = None,
) -> EditorState:
    context = where.context()
    suggested = suggestions.suggested_settings(context)
    initial = EngineSettingsForm.initial_from(settings)
    form = EngineSettingsForm(
        data, initial=initial, context=context, novice=mode == "novice", suggested=suggested
    )
    return EditorState(where, context, settings, form, mode)


@dataclass
class EditorResult:
    """What a POST to the editor did: the state to show, and whether the settings are good."""

    state: EditorState
    valid: bool


def read_post(request: HttpRequest, where: Where, settings: dict[str, Any]) -> EditorResult:
    """Read the editor's controls; apply a preset when one was chosen."""
    mode = request.POST.get("editor_mode", mode_of(request))
    state = build_state(where, settings, mode if mode in MODES else "novice", request.POST)
    if not state.form.is_valid():
        return EditorResult(state, False)
    new = state.form.settings(settings)
    try:
        new = validate_settings(new, state.context.version)
    except EngineSettingsError as error:
        state.error = f"{CATALOG[error.field].label if error.field in CATALOG else error.field}: "
        state.error += error.message
        return EditorResult(state, False)
    chosen = request.POST.get("preset", "")
    if chosen in presets.PRESETS:
        return EditorResult(tuned(where, new, state, chosen), True)
    state.settings = new
    state.notices += [state.form.capped] if state.form.capped else []
    return EditorResult(state, True)


def tuned(where: Where, settings: dict[str, Any], state: EditorState, key: str) -> EditorState:
    """The editor after a preset: a fresh form showing the tuned settings, changes marked."""
    after = presets.apply(key, settings, state.context)
    fresh = build_state(where, after, state.mode)
    fresh.preset_changed = presets.changed(settings, after)
    label = presets.PRESETS[key].label
    if fresh.preset_changed:
        fresh.notices.append(f"Tuned for {label}: changed {', '.join(fresh.changed_labels())}.")
    else:
        fresh.notices.append(f"Tuned for {label}: the settings were tuned for it already.")
    return fresh


# --- on a deployment's page: Engine settings → Change -----------------------------------------


def where_of(deployment: Deployment) -> Where:
    """A deployment's facts, read the way the launcher reads them (so the preview is its argv)."""
    return Where(
        model=deployment.model,
        variant=deployment.variant,
        cluster=deployment.cluster,
        size=float(deployment.accelerators_per_copy),
        served_name=launching.served_name(deployment),
        revision=launching.model_revision(deployment),
        model_reference=launching.model_reference(deployment),
        gguf_path=launching.gguf_path(deployment) if deployment.variant.gguf_file else "",
        asked_revision=deployment.revision,
    )


def restart_words(deployment: Deployment, settings: dict[str, Any]) -> str:
    """What Save will do to the running copies, said before Save."""
    if deployment.state in DEPLOYMENT_STOPPING_OR_STOPPED:
        return "It is stopped: the new settings apply when it starts."
    if deployment.copies_wanted > 1:
        return "Saving replaces the copies one at a time, so the deployment keeps serving."
    try:
        asked = placement_request(
            deployment.model, deployment.variant, settings, deployment.accelerators_per_copy, 1
        )
        room = fit_check(deployment.cluster, asked).fit_now
    except ValueError:
        room = 0
    if room:
        return "Saving starts a new copy beside the running one, then stops the old one."
    return (
        "There is no room for a new copy beside the running one: the deployment will be "
        "unavailable while its copy restarts with the new settings."
    )


def page_context(deployment: Deployment, state: EditorState, request: HttpRequest) -> dict:
    query = request.GET.get("flag_q", "")
    return {
        "deployment": deployment,
        "editor": state,
        "mode": state.mode,
        "flag_query": query,
        "all_flags": state.flags(query),
        "restart_words": restart_words(deployment, state.settings),
        "check_url": reverse("deployment_engine_settings_check", args=[deployment.pk]),
    }


@never_cache
def engine_settings(request: HttpRequest, pk: int) -> HttpResponse:
    """Change a deployment's engine settings (operators of its team)."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    where = where_of(deployment)
    if request.method != "POST":
        state = build_state(where, deployment.engine_settings, mode_of(request))
        context = page_context(deployment, state, request)
        return render(request, "deployments/editor/page.html", context)
    result = read_post(request, where, deployment.engine_settings)
    if result.valid and request.POST.get("action") == "save":
        return save(request, deployment, result.state)
    return render(
        request, "deployments/editor/page.html", page_context(deployment, result.state, request)
    )


def save(request: HttpRequest, deployment: Deployment, state: EditorState) -> HttpResponse:
    if state.settings == deployment.engine_settings:
        messages.info(request, "Nothing changed: the engine settings are as they were.")
        return redirect("deployment_detail", pk=deployment.pk)
    try:
        actions.change_settings(request.user, deployment, state.settings)
    except actions.ActionRefused as refused:
        state.error = refused.message
        return render(
            request, "deployments/editor/page.html", page_context(deployment, state, request)
        )
    capped = " ".join(state.notices)
    said = f"Engine settings saved. {capped} {restart_words(deployment, state.settings)}"
    messages.success(request, " ".join(said.split()))
    return redirect("deployment_detail", pk=deployment.pk)


@require_POST
def check_settings(request: HttpRequest, pk: int) -> HttpResponse:
    """The warnings and the preview for the controls as they are now (htmx; nothing saved)."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    result = read_post(request, where_of(deployment), deployment.engine_settings)
    return render(request, "deployments/editor/_check.html", {"editor": result.state})
