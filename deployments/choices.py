"""The vocabularies of deployments and copies: states (with their badge colours) and their named
groups, error codes, event kinds and log fields. Defined once here; used everywhere else."""

from __future__ import annotations

from django.db import models

from console.choices import Badge, StateChoices


class DeploymentState(StateChoices):
    REQUESTED = "REQUESTED", Badge.GREY, "Requested"
    DEPLOYING = "DEPLOYING", Badge.BLUE, "Deploying"
    INITIALIZING = "INITIALIZING", Badge.BLUE, "Initializing"
    DEPLOYED = "DEPLOYED", Badge.GREEN, "Deployed"
    DEGRADED = "DEGRADED", Badge.AMBER, "Degraded"
    # Scaled to zero by its autoscaling after an idle time: it wakes on the next request (an
    # operator's STOPPED never does).
    IDLE = "IDLE", Badge.GREY, "Idle"
    STOPPING = "STOPPING", Badge.GREY, "Stopping"
    STOPPED = "STOPPED", Badge.GREY, "Stopped"
    ERROR = "ERROR", Badge.AMBER, "Error"
    FAILED = "FAILED", Badge.RED, "Failed"
    MUST_REDOWNLOAD = "MUST_REDOWNLOAD", Badge.RED, "Must re-download"


# Named groups, so code says what it means ("can it be scaled?") rather than listing states.
# Placed: its state follows its copies, so it may move between any of these.
DEPLOYMENT_RUNNING = frozenset(
    {
        DeploymentState.DEPLOYING,
        DeploymentState.INITIALIZING,
        DeploymentState.DEPLOYED,
        DeploymentState.DEGRADED,
        DeploymentState.ERROR,
        DeploymentState.IDLE,
    }
)
DEPLOYMENT_PLACEABLE = DEPLOYMENT_RUNNING | {DeploymentState.REQUESTED}
DEPLOYMENT_CAN_SCALE = DEPLOYMENT_PLACEABLE  # scaling places or stops copies
DEPLOYMENT_ACTIVE = DEPLOYMENT_PLACEABLE | {DeploymentState.MUST_REDOWNLOAD}
DEPLOYMENT_SERVING = frozenset({DeploymentState.DEPLOYED, DeploymentState.DEGRADED})
DEPLOYMENT_STOPPING_OR_STOPPED = frozenset({DeploymentState.STOPPING, DeploymentState.STOPPED})
# It stopped trying: it starts over when checked, or when its files are on this server.
DEPLOYMENT_GAVE_UP = frozenset({DeploymentState.FAILED, DeploymentState.MUST_REDOWNLOAD})
DEPLOYMENT_FAILING = DEPLOYMENT_GAVE_UP | {DeploymentState.ERROR}
# The groups the deployments list filters by, by the name the filter shows.
DEPLOYMENT_GROUPS = {
    "active": DEPLOYMENT_ACTIVE,
    "serving": DEPLOYMENT_SERVING,
    "failed": DEPLOYMENT_FAILING,
    "stopped": DEPLOYMENT_STOPPING_OR_STOPPED,
}


class CopyState(StateChoices):
    REQUESTED = "REQUESTED", Badge.GREY, "Requested"
    PENDING = "PENDING", Badge.AMBER, "Waiting for room"
    COPYING_FILES = "COPYING_FILES", Badge.BLUE, "Copying files"
    STARTING = "STARTING", Badge.BLUE, "Starting"
    READY = "READY", Badge.GREEN, "Ready"
    STOPPING = "STOPPING", Badge.GREY, "Stopping"
    STOPPED = "STOPPED", Badge.GREY, "Stopped"
    FAILED = "FAILED", Badge.RED, "Failed"


COPY_WAITING = frozenset({CopyState.REQUESTED, CopyState.PENDING})
# On a machine and holding its room: copying its files, starting or serving.
COPY_PLACED = frozenset({CopyState.COPYING_FILES, CopyState.STARTING, CopyState.READY})
# A copy in one of these may have an engine running (or about to): its engine is owned. An
# engine of a copy in any other state (or of no copy at all) is a stray the reconciler stops.
COPY_MAY_HAVE_ENGINE = COPY_PLACED | {CopyState.STOPPING}
# Its engine was started: the watcher follows its health and its logs.
COPY_ENGINE_STARTED = frozenset({CopyState.STARTING, CopyState.READY, CopyState.STOPPING})
# A reservation of a copy in one of these is left over and is released.
COPY_HOLDS_NO_ROOM = frozenset({CopyState.PENDING, CopyState.STOPPED, CopyState.FAILED})
COPY_STOPPING_OR_STOPPED = frozenset({CopyState.STOPPING, CopyState.STOPPED})


class MoveState(StateChoices):
    """A re-packing move of one copy (deployments/moving.py), make-before-break."""

    PLANNED = "planned", Badge.GREY, "Planned"
    STARTING = "starting", Badge.BLUE, "Starting at its new place"
    SWITCHING = "switching", Badge.BLUE, "Old copy draining"
    DONE = "done", Badge.GREEN, "Done"
    ROLLED_BACK = "rolled_back", Badge.RED, "Rolled back"
    CANCELLED = "cancelled", Badge.GREY, "Cancelled"


MOVE_UNFINISHED = frozenset({MoveState.PLANNED, MoveState.STARTING, MoveState.SWITCHING})


class MachineFilesState(StateChoices):
    QUEUED = "queued", Badge.GREY, "Queued"
    COPYING = "copying", Badge.BLUE, "Copying"
    PRESENT = "present", Badge.GREEN, "On the machine"
    MISSING = "missing", Badge.AMBER, "Missing"
    FAILED = "failed", Badge.RED, "Failed"


MACHINE_FILES_IN_PROGRESS = frozenset({MachineFilesState.QUEUED, MachineFilesState.COPYING})


class RoutingPolicy(models.TextChoices):
    """How the gateway picks a ready copy for a request (gateway/routing.py)."""

    LEAST_LOADED = "least_loaded", "Least loaded"
    PREFIX = "prefix", "Prefix-aware"
    SESSION = "session", "Session affinity"


class RevisionOutcome(StateChoices):
    """Whether a revision's copies served (deployments/revisions.py)."""

    PENDING = "pending", Badge.GREY, "Not served yet"
    SERVED = "served", Badge.GREEN, "Served"
    FAILED = "failed", Badge.RED, "Failed"


class ErrorCode(models.TextChoices):
    NO_FIT = "NoFitError", "Does not fit"
    OOM = "OOM", "Out of memory"
    CUDA_ERROR = "CUDA_ERROR", "CUDA error"
    MODEL_LOADING_FAILURE = "MODEL_LOADING_FAILURE", "Model could not load"
    CONTAINER_EXITED = "CONTAINER_EXITED", "Engine exited"
    RUNTIME_ERROR = "RUNTIME_ERROR", "Runtime error"
    STARTUP_TIMEOUT = "STARTUP_TIMEOUT", "Start took too long"
    MUST_REDOWNLOAD = "MUST_REDOWNLOAD", "Files missing"
    DOWNLOAD_FAILED = "DOWNLOAD_FAILED", "Download failed"


class EventKind(models.TextChoices):
    STATE_CHANGE = "state_change", "State change"
    ACTION = "action", "Operator action"
    SYSTEM = "system", "System"
    AUTOSCALE = "autoscale", "Autoscaling"
    MOVE = "move", "Re-packing"


class LogStream(models.TextChoices):
    SERVING = "serving", "Model serving"
    ENGINE = "engine", "Engine"


class LogLevel(models.TextChoices):
    DEBUG = "DEBUG", "Debug"
    INFO = "INFO", "Info"
    WARNING = "WARNING", "Warning"
    ERROR = "ERROR", "Error"


class LogPattern(models.TextChoices):
    NONE = "", "None"
    OOM = "oom", "Out of memory"
    CUDA_ERROR = "cuda_error", "CUDA error"
    LOADING_FAILURE = "loading_failure", "Loading failure"


class NotificationEvent(models.TextChoices):
    """What a team may be told about its deployments (and "test", sent by hand)."""

    FAILED = "failed", "Failed"
    DEGRADED = "degraded", "Degraded"
    RECOVERED = "recovered", "Recovered"
    TEST = "test", "Test"


# The events a webhook may subscribe to (a test is sent on request only).
NOTIFICATION_SUBSCRIBABLE = (
    NotificationEvent.FAILED,
    NotificationEvent.DEGRADED,
    NotificationEvent.RECOVERED,
)


class DeliveryState(StateChoices):
    PENDING = "pending", Badge.BLUE, "Pending"
    DELIVERED = "delivered", Badge.GREEN, "Delivered"
    FAILED = "failed", Badge.RED, "Failed"
