"""The vocabularies of deployments and copies: states, their named groups and badge colours,
error codes, event kinds and log fields. Defined once here; used everywhere else."""

from __future__ import annotations

from django.db import models


class DeploymentState(models.TextChoices):
    REQUESTED = "REQUESTED", "Requested"
    DEPLOYING = "DEPLOYING", "Deploying"
    INITIALIZING = "INITIALIZING", "Initializing"
    DEPLOYED = "DEPLOYED", "Deployed"
    DEGRADED = "DEGRADED", "Degraded"
    STOPPING = "STOPPING", "Stopping"
    STOPPED = "STOPPED", "Stopped"
    ERROR = "ERROR", "Error"
    FAILED = "FAILED", "Failed"
    MUST_REDOWNLOAD = "MUST_REDOWNLOAD", "Must re-download"


class CopyState(models.TextChoices):
    REQUESTED = "REQUESTED", "Requested"
    PENDING = "PENDING", "Waiting for room"
    COPYING_FILES = "COPYING_FILES", "Copying files"
    STARTING = "STARTING", "Starting"
    READY = "READY", "Ready"
    STOPPING = "STOPPING", "Stopping"
    STOPPED = "STOPPED", "Stopped"
    FAILED = "FAILED", "Failed"


D = DeploymentState
C = CopyState

# Named groups, so code says what it means ("can it be scaled?") rather than listing states.
DEPLOYMENT_SERVING = frozenset({D.DEPLOYED, D.DEGRADED})
DEPLOYMENT_ACTIVE = frozenset(
    {D.REQUESTED, D.DEPLOYING, D.INITIALIZING, D.DEPLOYED, D.DEGRADED, D.ERROR, D.MUST_REDOWNLOAD}
)
DEPLOYMENT_CAN_SCALE = frozenset({D.DEPLOYING, D.INITIALIZING, D.DEPLOYED, D.DEGRADED, D.ERROR})
DEPLOYMENT_FAILED = frozenset({D.FAILED, D.ERROR, D.MUST_REDOWNLOAD})
DEPLOYMENT_STOPPED = frozenset({D.STOPPING, D.STOPPED})
# The groups the deployments list filters by, by the name the filter shows.
DEPLOYMENT_GROUPS = {
    "active": DEPLOYMENT_ACTIVE,
    "serving": DEPLOYMENT_SERVING,
    "failed": DEPLOYMENT_FAILED,
    "stopped": DEPLOYMENT_STOPPED,
}

# Badge colours (CSS class suffixes in static/css/berth.css).
BADGE_COLOURS: dict[str, str] = {
    D.REQUESTED: "grey",
    D.DEPLOYING: "blue",
    D.INITIALIZING: "blue",
    D.DEPLOYED: "green",
    D.DEGRADED: "amber",
    D.STOPPING: "grey",
    D.STOPPED: "grey",
    D.ERROR: "amber",
    D.FAILED: "red",
    D.MUST_REDOWNLOAD: "red",
    C.PENDING: "amber",
    C.COPYING_FILES: "blue",
    C.STARTING: "blue",
    C.READY: "green",
}


def badge_colour(state: str) -> str:
    return BADGE_COLOURS.get(state, "grey")


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
