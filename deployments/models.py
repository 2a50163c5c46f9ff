"""Deployments, their copies, the reservations that hold room, the audit events and the logs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Floor
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone

from catalog.models import Engine, Model, Variant
from clusters.models import Accelerator, Cluster, HardwareClass, Machine
from console import crypto
from console.choices import StateField
from console.models import SLUG_PATTERN, Team, slug_validator
from deployments.choices import (
    MACHINE_FILES_IN_PROGRESS,
    CopyState,
    DeliveryState,
    DeploymentState,
    ErrorCode,
    EventKind,
    LogLevel,
    LogPattern,
    LogStream,
    MachineFilesState,
    MoveState,
    NotificationEvent,
    RevisionOutcome,
    RoutingPolicy,
)
from deployments.guard import StateGuardedModel
from placement.words import percent_of

MOST_COPIES = 1000  # of one deployment: hosted, scaled or autoscaled
REPLY_WAIT_MIN_S = 10
REPLY_WAIT_MAX_S = 1800
# Requests one gateway process holds for one deployment when its copies are full.
MOST_WAITING = 10_000


class Deployment(StateGuardedModel):
    """One model running on one cluster in a number of copies, owned by a team."""

    INITIAL_STATE = DeploymentState.REQUESTED

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="deployments")
    model = models.ForeignKey(Model, on_delete=models.PROTECT, related_name="deployments")
    variant = models.ForeignKey(Variant, on_delete=models.PROTECT, related_name="deployments")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="deployments")
    revision = models.CharField(max_length=100, blank=True)
    accelerators_per_copy = models.DecimalField(
        max_digits=6,
        decimal_places=3,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal("0.001"))],
    )
    copies_wanted = models.PositiveIntegerField(default=1)
    # None: a fixed number of copies. Else the bounds and target the autoscaler keeps it in
    # (deployments/autoscaling.py: Policy, the one reading of this object).
    autoscaling = models.JSONField(null=True, blank=True, editable=False)
    # False: re-packing never moves its copies to make room for another (placement/repack.py).
    movable = models.BooleanField(default=True)
    # True: the operator accepted moves of other copies to make room for this one's copies
    # (deployments/moving.py), whatever the cluster's re-packing policy.
    make_room = models.BooleanField(default=False)
    # Woken from IDLE by a request at this time, and no copy serves yet; the cold start it
    # took last (seconds), which the gateway tells a client to wait.
    waking_since = models.DateTimeField(null=True, blank=True, editable=False)
    last_cold_start_s = models.FloatField(null=True, blank=True, editable=False)
    engine = models.CharField(max_length=16, choices=Engine.choices, default=Engine.VLLM)
    engine_settings = models.JSONField(
        default=dict, blank=True, help_text="only what differs from defaults"
    )
    chat_name = models.CharField(max_length=100, blank=True)
    reply_wait_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(REPLY_WAIT_MIN_S), MaxValueValidator(REPLY_WAIT_MAX_S)],
    )
    # How the gateway picks a copy: the least loaded, the one that served the prompt's prefix
    # last, or the one a session has used (gateway/routing.py).
    routing = models.CharField(
        max_length=16, choices=RoutingPolicy.choices, default=RoutingPolicy.LEAST_LOADED
    )
    # When every copy is full: how many requests may wait at each gateway process (0: none,
    # they go to the engines, which queue them), and for how long (empty: the reply wait).
    max_waiting = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(MOST_WAITING)]
    )
    queue_wait_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(REPLY_WAIT_MAX_S)],
    )
    # True: a revision whose copies never serve is rolled back, by itself, to the last one that
    # served (deployments/revisions.py).
    auto_rollback = models.BooleanField(default=False)
    notices = models.JSONField(default=list, blank=True, editable=False)
    state = StateField(DeploymentState, default=DeploymentState.REQUESTED, editable=False)
    last_message = models.TextField(blank=True, editable=False)
    last_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error_code = models.CharField(
        max_length=32, choices=ErrorCode.choices, blank=True, editable=False
    )
    last_error_message = models.TextField(blank=True, editable=False)
    last_error_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Per-deployment log counter, taken under the row lock so readers resuming after seq N
    # never skip a line that committed late.
    log_seq = models.PositiveBigIntegerField(default=0, editable=False)
    # Bumped when the size of a copy changes: copies of older generations are replaced.
    generation = models.PositiveIntegerField(default=1, editable=False)
    # Delete asks for a stop first; the row goes once every copy is observed stopped.
    delete_when_stopped = models.BooleanField(default=False, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(name__regex=SLUG_PATTERN), name="deployment_name_is_slug"
            ),
            models.CheckConstraint(
                condition=models.Q(reply_wait_s__isnull=True)
                | models.Q(reply_wait_s__gte=REPLY_WAIT_MIN_S, reply_wait_s__lte=REPLY_WAIT_MAX_S),
                name="reply_wait_within_10_1800",
            ),
            # A share of one accelerator (0 < s < 1) or a whole number of them.
            models.CheckConstraint(
                condition=models.Q(accelerators_per_copy__gt=0)
                & (
                    models.Q(accelerators_per_copy__lt=1)
                    | models.Q(accelerators_per_copy=Floor("accelerators_per_copy"))
                ),
                name="accelerators_per_copy_share_or_whole",
            ),
            models.CheckConstraint(
                condition=models.Q(copies_wanted__gte=0), name="copies_wanted_not_negative"
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=DeploymentState.values), name="deployment_state_known"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Copy(StateGuardedModel):
    """One running instance of a deployment's engine, placed on a machine."""

    INITIAL_STATE = CopyState.REQUESTED

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="copies")
    ordinal = models.PositiveIntegerField()
    generation = models.PositiveIntegerField(default=1)
    state = StateField(CopyState, default=CopyState.REQUESTED, editable=False)
    machine = models.ForeignKey(
        Machine, on_delete=models.SET_NULL, null=True, blank=True, related_name="copies"
    )
    allocated_bytes = models.PositiveBigIntegerField(default=0)
    gpu_memory_utilization = models.FloatField(null=True, blank=True)
    hardware_class = models.CharField(max_length=20, choices=HardwareClass.choices, blank=True)
    # whole_gpu | shared | time_sliced | mps | mig_<profile> | unified_memory
    sharing_class = models.CharField(max_length=32, blank=True)
    pending_reason = models.TextField(blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    # A local engine listens on this Unix socket instead of its port (clusters/backends/local).
    socket_path = models.CharField(max_length=200, blank=True, editable=False)
    process_id = models.PositiveIntegerField(null=True, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    # Leaving (a scale-down): out of the gateways' tables from then on; stopped once its
    # requests in flight are done, or BERTH_DRAIN_LIMIT_S after this.
    draining_since = models.DateTimeField(null=True, blank=True, editable=False)
    engine_api_key_encrypted = models.TextField(blank=True, editable=False)
    state_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, help_text="engine launched at")
    startup_deadline = models.DateTimeField(null=True, blank=True)
    # Where the watcher has read the copy's engine log up to (backend-specific, e.g. a byte offset).
    log_cursor = models.CharField(max_length=64, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error_code = models.CharField(max_length=32, choices=ErrorCode.choices, blank=True)
    last_error_message = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment__name", "ordinal"]
        verbose_name_plural = "copies"
        constraints = [
            models.UniqueConstraint(fields=["deployment", "ordinal"], name="copy_ordinal_unique"),
            models.CheckConstraint(
                condition=models.Q(state__in=CopyState.values), name="copy_state_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.deployment.name} copy {self.ordinal}"

    def set_engine_api_key(self, secret: str) -> None:
        self.engine_api_key_encrypted = crypto.encrypt(secret)

    def engine_api_key(self) -> str:
        return (
            crypto.decrypt(self.engine_api_key_encrypted) if self.engine_api_key_encrypted else ""
        )


class Reservation(models.Model):
    """Room a copy holds on an accelerator or slice (or, on Kubernetes, on a node and resource)."""

    copy = models.ForeignKey(Copy, on_delete=models.CASCADE, related_name="reservations")
    machine = models.ForeignKey(Machine, on_delete=models.PROTECT, related_name="reservations")
    accelerator = models.ForeignKey(
        Accelerator, on_delete=models.PROTECT, null=True, blank=True, related_name="reservations"
    )
    resource_name = models.CharField(
        max_length=80, blank=True, help_text="Kubernetes resource, e.g. nvidia.com/gpu"
    )
    reserved_bytes = models.PositiveBigIntegerField()
    share = models.DecimalField(max_digits=6, decimal_places=4)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["machine__name", "accelerator__index"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(share__gt=0, share__lte=1), name="reservation_share_0_1"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.copy} holds {self.reserved_bytes} B on {self.accelerator or self.machine}"


class HeldRoom(models.Model):
    """What one reservation held and from when to when, kept after the reservation goes."""

    # The history cost accrues from (gateway/cost.py), kept after the reservation is given back
    # and its copy or deployment deleted. Written beside each Reservation (record_held); closed
    # when the reservation row goes, whichever way it goes (a stop, a sweep, a deletion
    # cascading from its copy or deployment).

    reservation_id = models.PositiveBigIntegerField(db_index=True)
    deployment = models.ForeignKey(
        Deployment, on_delete=models.SET_NULL, null=True, blank=True, related_name="held_rooms"
    )
    deployment_name = models.CharField(max_length=63)
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    copy_ordinal = models.PositiveIntegerField()
    # The priced product (a MIG slice: its GPU's) and vendor, as they were when it was held.
    product = models.CharField(max_length=100, blank=True)
    vendor = models.CharField(max_length=8, blank=True)
    # GPUs held: the reservation's share of its GPU (a MIG slice: that share of the slice's part
    # of its GPU). CPU cores held: the share of its machine's cores. One of the two is 0.
    gpus = models.DecimalField(max_digits=8, decimal_places=4, default=Decimal(0))
    cores = models.DecimalField(max_digits=10, decimal_places=4, default=Decimal(0))
    held_from = models.DateTimeField()
    held_until = models.DateTimeField(null=True, blank=True, help_text="empty: still held")

    class Meta:
        ordering = ["held_from", "id"]
        indexes = [
            models.Index(fields=["deployment", "held_from"], name="held_room_by_deployment"),
            models.Index(fields=["team", "held_from"], name="held_room_by_team"),
        ]

    def __str__(self) -> str:
        return f"{self.deployment_name} copy {self.copy_ordinal} held {self.gpus or self.cores}"


def held_size(accelerator: Accelerator | None, machine: Machine, share: Decimal) -> dict[str, Any]:
    """What a reservation of `share` holds, in the units it is priced in."""
    if accelerator is None:  # Kubernetes before the device plugin's choice: a whole GPU's share
        return {"product": "", "vendor": "", "gpus": share, "cores": Decimal(0)}
    if accelerator.is_cpu:
        cores = (share * machine.cpu_count).quantize(Decimal("0.0001"))
        return {"product": "", "vendor": accelerator.vendor, "gpus": Decimal(0), "cores": cores}
    gpus = share
    gpu = accelerator.parent if accelerator.parent_id else accelerator
    if accelerator.parent_id and gpu.memory_bytes:
        gpus = (share * accelerator.memory_bytes / gpu.memory_bytes).quantize(Decimal("0.0001"))
    return {"product": gpu.product, "vendor": gpu.vendor, "gpus": gpus, "cores": Decimal(0)}


def record_held(reservations: list[Reservation]) -> None:
    """A HeldRoom for each reservation just written (they have their ids), in one insert."""
    copies = Copy.objects.filter(pk__in={r.copy_id for r in reservations}).select_related(
        "deployment"
    )
    by_copy = {copy.pk: copy for copy in copies}
    ids = {r.accelerator_id for r in reservations if r.accelerator_id}
    accelerators = Accelerator.objects.select_related("parent").in_bulk(ids)
    machines = Machine.objects.in_bulk({r.machine_id for r in reservations})
    HeldRoom.objects.bulk_create(
        HeldRoom(
            reservation_id=r.pk,
            deployment=by_copy[r.copy_id].deployment,
            deployment_name=by_copy[r.copy_id].deployment.name,
            team_id=by_copy[r.copy_id].deployment.team_id,
            copy_ordinal=by_copy[r.copy_id].ordinal,
            held_from=r.created_at,
            **held_size(accelerators.get(r.accelerator_id), machines[r.machine_id], r.share),
        )
        for r in reservations
    )


@receiver(post_delete, sender=Reservation)
def close_held(sender: Any, instance: Reservation, **kwargs: Any) -> None:
    """A reservation given back (however its row went) ends the room it held."""
    HeldRoom.objects.filter(reservation_id=instance.pk, held_until__isnull=True).update(
        held_until=timezone.now()
    )


class CopyMove(models.Model):
    """One make-before-break move of a copy to other GPUs of its cluster (re-packing)."""

    # Made to give room to another deployment's copies (`for_deployment`) or to free whole
    # GPUs (consolidation). The moves of one plan share `plan` and run one at a time in
    # `position` order; each row is the truth of its step, so a console restart continues
    # from it (deployments/moving.py).

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="moves")
    plan = models.CharField(max_length=32, db_index=True)
    position = models.PositiveIntegerField()
    for_deployment = models.ForeignKey(
        Deployment, on_delete=models.SET_NULL, null=True, blank=True, related_name="moves_for"
    )
    why = models.CharField(max_length=200)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="moves")
    old_copy = models.ForeignKey(
        Copy, on_delete=models.SET_NULL, null=True, blank=True, related_name="moved_out"
    )
    new_copy = models.ForeignKey(
        Copy, on_delete=models.SET_NULL, null=True, blank=True, related_name="moved_in"
    )
    from_words = models.CharField(max_length=200)
    to_machine = models.ForeignKey(Machine, on_delete=models.CASCADE, related_name="moves_in")
    to_accelerators = models.JSONField(default=list)
    state = StateField(MoveState, default=MoveState.PLANNED)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "plan", "position"]

    def __str__(self) -> str:
        return f"move {self.plan}/{self.position} of {self.deployment_id}"


class Event(models.Model):
    """An audit row: a state change or an operator's action; it outlives its deployment."""

    deployment = models.ForeignKey(
        Deployment, on_delete=models.SET_NULL, null=True, blank=True, related_name="events"
    )
    deployment_name = models.CharField(max_length=63)
    # The team the deployment belonged to, kept when the deployment is deleted so that its team
    # still sees its events (the Events page); filled from the deployment on save.
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="events"
    )
    copy = models.ForeignKey(
        Copy, on_delete=models.SET_NULL, null=True, blank=True, related_name="events"
    )
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=16, choices=EventKind.choices)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    message = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_name = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.take_team()
        super().save(*args, **kwargs)

    @classmethod
    def create_many(cls, events: list[Event]) -> list[Event]:
        """Events written in one insert, each with its team as save() gives it."""
        for event in events:
            event.take_team()
        return cls.objects.bulk_create(events)

    def take_team(self) -> None:
        # Every writer (save, create_many) passes here: no writer has to remember the team.
        if self.team_id is None and self.deployment is not None:
            self.team_id = self.deployment.team_id

    def __str__(self) -> str:
        return (
            f"{self.deployment_name}: {self.kind} {self.from_state}→{self.to_state} {self.message}"
        )


class LogLine(models.Model):
    """One line of a deployment's logs: the serving stream or what the engine printed."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="log_lines")
    copy = models.ForeignKey(
        Copy, on_delete=models.SET_NULL, null=True, blank=True, related_name="log_lines"
    )
    machine_name = models.CharField(max_length=253, blank=True)
    stream = models.CharField(max_length=8, choices=LogStream.choices)
    seq = models.PositiveBigIntegerField()
    at = models.DateTimeField()
    level = models.CharField(max_length=8, choices=LogLevel.choices, default=LogLevel.INFO)
    text = models.TextField()
    pattern = models.CharField(max_length=16, choices=LogPattern.choices, blank=True)

    class Meta:
        ordering = ["deployment", "seq"]
        constraints = [models.UniqueConstraint(fields=["deployment", "seq"], name="log_seq_unique")]

    def __str__(self) -> str:
        return f"{self.deployment_id}#{self.seq} {self.text[:60]}"


class EngineFigures(models.Model):
    """What a deployment's engines reported on /metrics at one moment, summed over its copies."""

    deployment = models.ForeignKey(
        Deployment, on_delete=models.CASCADE, related_name="engine_figures"
    )
    at = models.DateTimeField(db_index=True)
    copies = models.PositiveIntegerField(default=0)
    requests_running = models.FloatField(default=0)
    requests_waiting = models.FloatField(default=0)
    kv_cache_usage = models.FloatField(default=0, help_text="the highest of its copies, 0..1")
    prompt_tokens_total = models.FloatField(default=0)
    generation_tokens_total = models.FloatField(default=0)
    ttft_seconds_sum = models.FloatField(default=0)
    ttft_count = models.FloatField(default=0)

    class Meta:
        ordering = ["deployment", "-at"]

    def __str__(self) -> str:
        return f"{self.deployment_id} at {self.at:%H:%M:%S}"


class MachineFiles(models.Model):
    """A variant's files on one machine of a cluster (copied by Sync or before a copy starts)."""

    # One row per machine, variant and commit; state changes go through
    # deployments/machine_files.py, which claims a row with a compare-and-set update.

    machine = models.ForeignKey(
        "clusters.Machine", on_delete=models.CASCADE, related_name="model_files"
    )
    variant = models.ForeignKey(Variant, on_delete=models.CASCADE, related_name="machine_copies")
    revision = models.CharField(max_length=64, blank=True, help_text="commit of the files")
    state = StateField(MachineFilesState, default=MachineFilesState.QUEUED)
    size_bytes = models.PositiveBigIntegerField(default=0)
    progress_bytes = models.PositiveBigIntegerField(default=0)
    message = models.TextField(blank=True)
    checked_at = models.DateTimeField(null=True, blank=True, help_text="when last found or copied")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "machine files"
        ordering = ["machine__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["machine", "variant", "revision"], name="one_files_row_per_machine"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.variant} on {self.machine}"

    @property
    def progress_percent(self) -> int:
        return percent_of(self.progress_bytes, self.size_bytes)

    @property
    def in_progress(self) -> bool:
        return self.state in MACHINE_FILES_IN_PROGRESS


class Webhook(models.Model):
    """Where a team hears by signed HTTPS POST that a deployment failed, degraded or recovered."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100)
    url = models.URLField(max_length=2000)
    # Signs every request; Berth generates it, shows it once and keeps it encrypted.
    secret_encrypted = models.TextField(editable=False)
    events = models.JSONField(default=list, help_text="failed, degraded and/or recovered")
    enabled = models.BooleanField(default=True)
    # Private, loopback and link-local addresses are refused unless a platform admin allows them.
    allow_private = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="webhook_name_unique_in_team")
        ]

    def __str__(self) -> str:
        return f"webhook {self.name} of team {self.team.name}"

    def set_secret(self, secret: str) -> None:
        self.secret_encrypted = crypto.encrypt(secret)

    def secret(self) -> str:
        return crypto.decrypt(self.secret_encrypted)

    def wants(self, event: str) -> bool:
        return event in self.events


class EmailRecipient(models.Model):
    """An address where a team hears by e-mail that a deployment failed, degraded or recovered."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="email_recipients")
    address = models.EmailField(max_length=254)
    events = models.JSONField(default=list, help_text="failed, degraded and/or recovered")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["address", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "address"], name="email_recipient_unique_in_team"
            )
        ]

    def __str__(self) -> str:
        return f"e-mail address {self.address} of team {self.team.name}"

    @property
    def name(self) -> str:
        """What the pages and audit rows call it, as a webhook is called by its name."""
        return self.address

    def wants(self, event: str) -> bool:
        return event in self.events


class Delivery(models.Model):
    """One notification to one webhook: its payload, and how its tries went."""

    # The row is the truth of the work: the delivery task claims it, beat sends again what is due.
    # Exactly one of the two: where this notice goes.
    webhook = models.ForeignKey(
        Webhook, on_delete=models.CASCADE, related_name="deliveries", null=True, blank=True
    )
    recipient = models.ForeignKey(
        EmailRecipient, on_delete=models.CASCADE, related_name="deliveries", null=True, blank=True
    )
    event = models.CharField(max_length=16, choices=NotificationEvent.choices)
    deployment = models.ForeignKey(
        Deployment, on_delete=models.SET_NULL, null=True, blank=True, related_name="deliveries"
    )
    deployment_name = models.CharField(max_length=63, blank=True)
    payload = models.JSONField()
    state = StateField(DeliveryState, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(webhook__isnull=False, recipient__isnull=True)
                | models.Q(webhook__isnull=True, recipient__isnull=False),
                name="delivery_goes_to_one_destination",
            )
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} of {self.event} to {self.destination}"

    @property
    def destination(self) -> Webhook | EmailRecipient:
        destination = self.webhook or self.recipient
        assert destination is not None  # the check constraint holds one
        return destination


class Revision(models.Model):
    """One numbered state of what an operator asked of a deployment, kept with its change."""

    # deployments/revisions.py says what `spec` holds; it is written in the same transaction
    # as the change it records.

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()
    # The generation of copies that run it: a change that rolls the copies starts a new one.
    generation = models.PositiveIntegerField()
    why = models.TextField(help_text="the change, in the Event's words")
    comment = models.CharField(max_length=500, blank=True)
    # A rollback's revision: the number whose spec it restores.
    restores = models.PositiveIntegerField(null=True, blank=True)
    outcome = StateField(RevisionOutcome, max_length=8, default=RevisionOutcome.PENDING)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_name = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "number"], name="one_revision_per_number")
        ]

    def __str__(self) -> str:
        return f"{self.deployment.name} revision {self.number}"
