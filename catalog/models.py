"""The models this server knows (marketplace), their variants, and files kept on this server."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.choices import Badge, StateChoices, StateField
from placement.words import percent_of


class Task(models.TextChoices):
    CHAT = "chat", "Chat"
    REASONING = "reasoning", "Reasoning"
    TOOL_CALLING = "tool_calling", "Tool calling"
    EMBEDDINGS = "embeddings", "Embeddings"


class Engine(models.TextChoices):
    VLLM = "vllm", "vLLM"
    LLAMACPP = "llamacpp", "llama.cpp"


class Model(models.Model):
    """A model in the catalog, with the architecture facts placement needs."""

    repo_id = models.CharField(max_length=200, unique=True, help_text="Hugging Face repository id")
    name = models.CharField(max_length=120)
    family = models.CharField(max_length=60, blank=True)
    architecture = models.CharField(max_length=80, blank=True)
    description = models.TextField(blank=True)
    tasks = models.JSONField(default=list, blank=True)
    license = models.CharField(max_length=60, blank=True)
    gated = models.BooleanField(default=False)
    layers = models.PositiveIntegerField()
    attention_heads = models.PositiveIntegerField()
    kv_heads = models.PositiveIntegerField()
    head_dim = models.PositiveIntegerField()
    hidden_size = models.PositiveIntegerField()
    vocab_size = models.PositiveIntegerField()
    max_context = models.PositiveIntegerField()
    params_total = models.PositiveBigIntegerField()
    params_active = models.PositiveBigIntegerField()
    native_dtype = models.CharField(max_length=16, default="bfloat16")
    sliding_window = models.PositiveIntegerField(null=True, blank=True)
    global_layers = models.PositiveIntegerField(
        null=True, blank=True, help_text="full-attention layers"
    )
    mla = models.JSONField(
        null=True, blank=True, help_text='e.g. {"kv_lora_rank": 512, "qk_rope_head_dim": 64}'
    )
    encoder_only = models.BooleanField(default=False)
    source = models.TextField(blank=True)
    added_at = models.DateTimeField(auto_now_add=True)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )

    class Meta:
        ordering = ["family", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kv_heads__lte=models.F("attention_heads")),
                name="kv_heads_at_most_heads",
            ),
            models.CheckConstraint(
                condition=models.Q(params_active__lte=models.F("params_total")),
                name="active_params_at_most_total",
            ),
        ]

    def __str__(self) -> str:
        return self.repo_id


class Variant(models.Model):
    """One way to run a model: precision and file format, size, engine and minimum hardware."""

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="variants")
    name = models.CharField(max_length=40)
    precision = models.CharField(max_length=16)
    format = models.CharField(max_length=16)
    repo_id = models.CharField(max_length=200)
    gguf_file = models.CharField(max_length=200, blank=True)
    size_bytes = models.PositiveBigIntegerField()
    size_estimated = models.BooleanField(
        default=True, help_text="computed, not yet read from the hub"
    )
    engine = models.CharField(max_length=16, choices=Engine.choices, default=Engine.VLLM)
    min_compute_capability = models.CharField(max_length=8, blank=True)

    class Meta:
        ordering = ["model", "size_bytes"]
        constraints = [
            models.UniqueConstraint(fields=["model", "name"], name="variant_name_unique_per_model"),
            models.CheckConstraint(
                condition=models.Q(size_bytes__gt=0), name="variant_size_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.repo_id} {self.name}"


class ServerModelState(StateChoices):
    QUEUED = "queued", Badge.GREY, "Queued"
    DOWNLOADING = "downloading", Badge.BLUE, "Downloading"
    READY = "ready", Badge.GREEN, "Ready"
    FAILED = "failed", Badge.RED, "Failed"
    MUST_REDOWNLOAD = "must_redownload", Badge.AMBER, "Must re-download"


SERVER_MODEL_IN_PROGRESS = frozenset({ServerModelState.QUEUED, ServerModelState.DOWNLOADING})
# The download may be asked again (and a deployment waiting for it fails meanwhile).
SERVER_MODEL_RETRYABLE = frozenset({ServerModelState.FAILED, ServerModelState.MUST_REDOWNLOAD})


class ServerModel(models.Model):
    """A variant's files kept on this server (downloaded from the hub, or a local path)."""

    # One row per variant and requested revision; `revision` is the commit the files come
    # from (pinned when the download resolves it). State changes go through downloads.py.

    variant = models.ForeignKey(Variant, on_delete=models.PROTECT, related_name="server_copies")
    requested_revision = models.CharField(
        max_length=100, blank=True, help_text="branch, tag or commit asked for"
    )
    revision = models.CharField(max_length=64, blank=True, help_text="commit once downloaded")
    path = models.CharField(max_length=500, blank=True)
    size_bytes = models.PositiveBigIntegerField(default=0)
    state = StateField(ServerModelState, default=ServerModelState.QUEUED)
    progress_bytes = models.PositiveBigIntegerField(default=0)
    bytes_per_s = models.PositiveBigIntegerField(default=0, help_text="download speed lately")
    files = models.JSONField(default=list, blank=True, help_text="[[path, bytes], …]")
    error = models.TextField(blank=True)
    # Whose Hugging Face token downloads it (gated models); the token itself stays on the team.
    team = models.ForeignKey(
        "console.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["variant__model__name", "variant__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["variant", "requested_revision"],
                name="one_server_copy_per_requested_revision",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.variant} @ {self.revision or self.requested_revision or 'main'}"

    @property
    def progress_percent(self) -> int:
        return percent_of(self.progress_bytes, self.size_bytes)

    @property
    def in_progress(self) -> bool:
        return self.state in SERVER_MODEL_IN_PROGRESS

    @property
    def retryable(self) -> bool:
        return self.state in SERVER_MODEL_RETRYABLE


class CodeTrust(models.Model):
    """A platform admin's trust in a model revision's own code, or an operator's request for it."""

    # Who decided and when (trusted_*), or only who asked (asked_*); only trusted rows reach an
    # engine's command line (catalog/trust.py).

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="code_trusts")
    revision = models.CharField(
        max_length=100, blank=True, help_text="blank: the revision a deployment gets by default"
    )
    asked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    asked_at = models.DateTimeField(null=True, blank=True)
    trusted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    trusted_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["model", "revision"]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "revision"], name="one_code_trust_per_revision"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model} @ {self.revision or 'default'}"

    @property
    def trusted(self) -> bool:
        return self.trusted_at is not None


class GatedAccess(models.Model):
    """Whether a team's own Hugging Face token may read a gated model, as the hub last said."""

    # Checked with the hub before the team hosts the model; another team's download does not
    # grant it (catalog/gated.py). Only a granted answer is kept: a refusal is asked again.
    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="gated_access")
    checked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "model"], name="one_gated_access_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.team} may read {self.model}"
