"""Typed results: what the console's API answers, as frozen dataclasses.

Each class reads the API's JSON with `from_api`, which takes the fields it knows and leaves any
newer ones aside, so that an older client keeps working against a newer console. Memory is in
GiB (2^30 bytes) in fields ending in `_gb`, as the API gives it, and in bytes where it says so.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

GIB = 2**30
Json = Mapping[str, Any]


class DeploymentStatus(enum.StrEnum):
    """A deployment's state, as the console names it."""

    REQUESTED = "REQUESTED"
    DEPLOYING = "DEPLOYING"
    INITIALIZING = "INITIALIZING"
    DEPLOYED = "DEPLOYED"
    DEGRADED = "DEGRADED"
    IDLE = "IDLE"  # scaled to zero when idle: the next request wakes it
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    ERROR = "ERROR"
    FAILED = "FAILED"
    MUST_REDOWNLOAD = "MUST_REDOWNLOAD"

    @property
    def is_ready(self) -> bool:
        """Every wanted copy serves (an IDLE deployment wants none: a request wakes it)."""
        return self in (DeploymentStatus.DEPLOYED, DeploymentStatus.IDLE)

    @property
    def is_failed(self) -> bool:
        """A failure the waiting functions give up on (ERROR is retried by the console itself,
        and may still pass: wait again to see it through)."""
        return self in FAILED_STATES

    @property
    def is_stopped(self) -> bool:
        return self in (DeploymentStatus.STOPPING, DeploymentStatus.STOPPED)


FAILED_STATES = frozenset(
    {DeploymentStatus.FAILED, DeploymentStatus.ERROR, DeploymentStatus.MUST_REDOWNLOAD}
)


def moment(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def plain(value: Any) -> Any:
    """A result as JSON-ready data: dataclasses as dicts, days and times in ISO 8601, states as
    text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, date):  # a datetime too
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


# --- deployments ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentCopy:
    """One copy of a deployment: where it runs and how it is doing."""

    ordinal: int
    state: str
    topology: str
    node_name: str | None
    gpu_indexes: list[int]
    mig_profile: str | None
    gpu_vendor: str | None
    hardware_class: str | None
    sharing_class: str | None
    allocated_capacity_gb: float
    gpu_memory_utilization: float | None
    attempts: int
    pending_reason: str
    last_error_code: str | None
    last_error_message: str
    last_error_at: datetime | None

    @classmethod
    def from_api(cls, data: Json) -> DeploymentCopy:
        return cls(
            ordinal=int(data["ordinal"]),
            state=str(data["state"]),
            topology=str(data["topology"]),
            node_name=data.get("node_name"),
            gpu_indexes=[int(index) for index in data.get("gpu_indexes", [])],
            mig_profile=data.get("mig_profile"),
            gpu_vendor=data.get("gpu_vendor"),
            hardware_class=data.get("hardware_class"),
            sharing_class=data.get("sharing_class"),
            allocated_capacity_gb=float(data.get("allocated_capacity_gb", 0.0)),
            gpu_memory_utilization=data.get("gpu_memory_utilization"),
            attempts=int(data.get("attempts", 0)),
            pending_reason=str(data.get("pending_reason", "")),
            last_error_code=data.get("last_error_code"),
            last_error_message=str(data.get("last_error_message", "")),
            last_error_at=moment(data.get("last_error_at")),
        )


@dataclass(frozen=True)
class Autoscaling:
    """A deployment's bounds and target: the console adds copies when the load (requests in
    flight and waiting, per copy) stays above `target_in_flight` for `up_window_s`, and lets
    one go when it stays below for `down_window_s` (None: the console's defaults)."""

    min_copies: int
    max_copies: int
    target_in_flight: float = 4.0
    target_ttft_ms: float | None = None
    up_window_s: int | None = None
    down_window_s: int | None = None
    idle_minutes: int | None = None

    @classmethod
    def from_api(cls, data: Json | None) -> Autoscaling | None:
        if data is None:
            return None
        return cls(
            min_copies=int(data["min_copies"]),
            max_copies=int(data["max_copies"]),
            target_in_flight=float(data.get("target_in_flight") or 4.0),
            target_ttft_ms=data.get("target_ttft_ms"),
            up_window_s=data.get("up_window_s"),
            down_window_s=data.get("down_window_s"),
            idle_minutes=data.get("idle_minutes"),
        )


@dataclass(frozen=True)
class Deployment:
    """A model hosted on a cluster in one or more copies."""

    id: int
    name: str
    team: str
    model: str
    variant: str
    cluster: str
    engine: str
    revision: str
    accelerators_per_copy: float
    copies_wanted: int
    copies_ready: int
    engine_settings: dict[str, Any]
    chat_name: str
    reply_wait_s: int | None
    state: DeploymentStatus
    last_message: str
    last_checked_at: datetime | None
    last_error_code: str | None
    last_error_message: str
    last_error_at: datetime | None
    notices: list[str]
    created_by: str | None
    created_at: datetime | None
    copies: list[DeploymentCopy]
    autoscaling: Autoscaling | None = None  # None: a fixed number of copies
    routing: str = "least_loaded"  # how the gateway picks a copy: least_loaded, prefix, session
    max_waiting: int = 0  # requests that may wait at each gateway when every copy is full
    queue_wait_s: int | None = None  # for how long each (None: the reply wait)
    auto_rollback: bool = False  # a revision whose copies never serve is rolled back by itself

    @property
    def served_as(self) -> str:
        """The `model` a gateway request names: the chat name, else the deployment's name."""
        return self.chat_name or self.name

    @classmethod
    def from_api(cls, data: Json) -> Deployment:
        return cls(
            id=int(data["id"]),
            name=str(data["name"]),
            team=str(data.get("team", "")),
            model=str(data.get("model", "")),
            variant=str(data.get("variant", "")),
            cluster=str(data.get("cluster", "")),
            engine=str(data.get("engine", "")),
            revision=str(data.get("revision", "")),
            accelerators_per_copy=float(data.get("accelerators_per_copy", 1)),
            copies_wanted=int(data.get("copies_wanted", 0)),
            copies_ready=int(data.get("copies_ready", 0)),
            engine_settings=dict(data.get("engine_settings") or {}),
            chat_name=str(data.get("chat_name", "")),
            reply_wait_s=data.get("reply_wait_s"),
            routing=str(data.get("routing", "least_loaded")),
            max_waiting=int(data.get("max_waiting", 0)),
            queue_wait_s=data.get("queue_wait_s"),
            state=DeploymentStatus(data["state"]),
            last_message=str(data.get("last_message", "")),
            last_checked_at=moment(data.get("last_checked_at")),
            last_error_code=data.get("last_error_code"),
            last_error_message=str(data.get("last_error_message", "")),
            last_error_at=moment(data.get("last_error_at")),
            notices=[str(notice) for notice in data.get("notices", [])],
            created_by=data.get("created_by"),
            created_at=moment(data.get("created_at")),
            copies=[DeploymentCopy.from_api(copy) for copy in data.get("copies", [])],
            autoscaling=Autoscaling.from_api(data.get("autoscaling")),
            auto_rollback=bool(data.get("auto_rollback", False)),
        )


@dataclass(frozen=True)
class RevisionChange:
    """One field that differs between two revisions: `words` says it as the console does,
    e.g. "routing: least_loaded → prefix"; `label` is the field's name in words."""

    field: str
    label: str
    before: Any
    after: Any
    words: str

    @classmethod
    def from_api(cls, data: Json) -> RevisionChange:
        return cls(
            field=str(data["field"]),
            label=str(data.get("label", data["field"])),
            before=data.get("before"),
            after=data.get("after"),
            words=str(data.get("words", "")),
        )


@dataclass(frozen=True)
class Revision:
    """One change of what a deployment is asked to be, numbered from 1: who made it (`by`:
    "system" for Berth's own), when, why and with what comment; `restores`: the revision a
    rollback made again; `outcome`: pending, served or failed (whether its copies served);
    `current`: the one the deployment is asked to be now; `spec`: what it asked for;
    `changes`: what it changed from the revision before it."""

    number: int
    at: datetime | None
    by: str
    why: str
    comment: str
    restores: int | None
    outcome: str
    current: bool
    spec: dict[str, Any]
    changes: list[RevisionChange]

    @classmethod
    def from_api(cls, data: Json) -> Revision:
        return cls(
            number=int(data["number"]),
            at=moment(data.get("at")),
            by=str(data.get("by", "")),
            why=str(data.get("why", "")),
            comment=str(data.get("comment", "")),
            restores=data.get("restores"),
            outcome=str(data.get("outcome", "")),
            current=bool(data.get("current", False)),
            spec=dict(data.get("spec") or {}),
            changes=changes_of(data),
        )


def changes_of(data: Json) -> list[RevisionChange]:
    return [RevisionChange.from_api(change) for change in data.get("changes", [])]


@dataclass(frozen=True)
class Choice:
    """What the console chose for a field the request left out, and why."""

    value: str
    why: str


@dataclass(frozen=True)
class HostedDeployment:
    """The console's answer to a new deployment: recorded, placing goes on in the background."""

    id: int
    state: DeploymentStatus
    chosen: dict[str, Choice] = field(default_factory=dict)

    @classmethod
    def from_api(cls, data: Json) -> HostedDeployment:
        chosen = {
            name: Choice(str(choice["value"]), str(choice["why"]))
            for name, choice in (data.get("chosen") or {}).items()
        }
        return cls(id=int(data["id"]), state=DeploymentStatus(data["state"]), chosen=chosen)


@dataclass(frozen=True)
class LogLine:
    """One line of a deployment's log; `seq` orders them and is what following resumes from."""

    seq: int
    at: datetime | None
    level: str
    stream: str
    machine: str
    text: str

    @classmethod
    def from_api(cls, data: Json) -> LogLine:
        return cls(
            seq=int(data["seq"]),
            at=moment(data.get("at")),
            level=str(data.get("level", "")),
            stream=str(data.get("stream", "")),
            machine=str(data.get("machine", "")),
            text=str(data.get("text", "")),
        )


@dataclass(frozen=True)
class Event:
    """Something that happened in your teams: a state change, an action, a download…"""

    at: datetime | None
    team: str | None
    actor: str
    kind: str
    object: str
    message: str

    @classmethod
    def from_api(cls, data: Json) -> Event:
        return cls(
            at=moment(data.get("at")),
            team=data.get("team"),
            actor=str(data.get("actor", "")),
            kind=str(data.get("kind", "")),
            object=str(data.get("object", "")),
            message=str(data.get("message", "")),
        )


@dataclass(frozen=True)
class UsageRow:
    """One team's, key's, user's or deployment's use of the gateway in one hour or day."""

    id: int | None  # None: the team, key, user or deployment is gone (a chat page's: no key)
    name: str | None
    bucket_start: datetime | None  # the hour's or day's start, in UTC
    requests: int
    prompt_tokens: int
    completion_tokens: int
    mean_ttft_s: float | None  # mean time to first token; None when no reply began

    @classmethod
    def from_api(cls, data: Json) -> UsageRow:
        return cls(
            id=data.get("id"),
            name=data.get("name"),
            bucket_start=moment(data.get("bucket_start")),
            requests=int(data.get("requests", 0)),
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            mean_ttft_s=data.get("mean_ttft_s"),
        )


def day_of(value: Any) -> date:
    return date.fromisoformat(str(value))


def money(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class CostDay:
    """One UTC day of a deployment's or team's cost."""

    day: date
    cost: float  # in the report's currency
    tokens: int  # prompt and completion tokens served that day
    cost_per_million_tokens: float | None  # None: no tokens served

    @classmethod
    def from_api(cls, data: Json) -> CostDay:
        return cls(
            day=day_of(data["day"]),
            cost=float(data.get("cost", 0.0)),
            tokens=int(data.get("tokens", 0)),
            cost_per_million_tokens=money(data.get("cost_per_million_tokens")),
        )


@dataclass(frozen=True)
class CostItem:
    """What the room one deployment's (or team's) copies held cost over the report's days."""

    id: int | None  # None: the deployment or team is gone (its name is kept)
    name: str
    cost: float
    tokens: int
    cost_per_million_tokens: float | None
    unpriced: list[str]  # what it held that has no price yet, counted as 0
    days: list[CostDay]  # the days with a cost or tokens, oldest first

    @classmethod
    def from_api(cls, data: Json) -> CostItem:
        return cls(
            id=data.get("id"),
            name=str(data.get("name", "")),
            cost=float(data.get("cost", 0.0)),
            tokens=int(data.get("tokens", 0)),
            cost_per_million_tokens=money(data.get("cost_per_million_tokens")),
            unpriced=[str(name) for name in data.get("unpriced", [])],
            days=[CostDay.from_api(day) for day in data.get("days", [])],
        )


@dataclass(frozen=True)
class CostReport:
    """The cost of the room deployments held, per deployment or team, costliest first."""

    currency: str
    first_day: date  # the API's `from`
    last_day: date  # its `to`, included
    items: list[CostItem]

    @classmethod
    def from_api(cls, data: Json) -> CostReport:
        return cls(
            currency=str(data.get("currency", "")),
            first_day=day_of(data["from"]),
            last_day=day_of(data["to"]),
            items=[CostItem.from_api(item) for item in data.get("items", [])],
        )


# --- placement -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """The memory one copy needs on each of its GPUs, in parts (GiB) and in all (bytes)."""

    weights_gb: float
    kv_cache_gb: float
    activations_gb: float
    overhead_gb: float
    total_gb: float
    total_bytes: int
    kv_cache_bytes_per_token: int
    tensor_parallel: int
    max_model_len: int

    @classmethod
    def from_api(cls, data: Json) -> Estimate:
        total_gb = float(data["total_gb"])
        return cls(
            weights_gb=float(data["weights_gb"]),
            kv_cache_gb=float(data["kv_cache_gb"]),
            activations_gb=float(data["activations_gb"]),
            overhead_gb=float(data["overhead_gb"]),
            total_gb=total_gb,
            # A console older than total_bytes gives the GiB to two decimals only.
            total_bytes=int(data.get("total_bytes", round(total_gb * GIB))),
            kv_cache_bytes_per_token=int(data["kv_cache_bytes_per_token"]),
            tensor_parallel=int(data["tensor_parallel"]),
            max_model_len=int(data["max_model_len"]),
        )


@dataclass(frozen=True)
class Placed:
    """Where one copy would go."""

    copy_number: int
    machine: str
    accelerators: list[int]
    slice: str | None
    allocated_capacity_gb: float
    gpu_memory_utilization: float
    hardware_class: str
    sharing_class: str

    @classmethod
    def from_api(cls, data: Json) -> Placed:
        return cls(
            copy_number=int(data["copy_number"]),
            machine=str(data["machine"]),
            accelerators=[int(a) for a in data.get("accelerators", [])],
            slice=data.get("slice"),
            allocated_capacity_gb=float(data["allocated_capacity_gb"]),
            gpu_memory_utilization=float(data["gpu_memory_utilization"]),
            hardware_class=str(data["hardware_class"]),
            sharing_class=str(data["sharing_class"]),
        )


@dataclass(frozen=True)
class NotPlaced:
    """A copy that would not fit: placement's reason (e.g. insufficient_capacity) and words."""

    copy_number: int
    reason: str
    message: str

    @classmethod
    def from_api(cls, data: Json) -> NotPlaced:
        return cls(int(data["copy_number"]), str(data["reason"]), str(data["message"]))


@dataclass(frozen=True)
class Move:
    """A copy moved to make room (make-before-break); `deployment` None: another team's."""

    deployment: str | None
    copy: int | None
    from_machine: str
    from_accelerators: list[int]
    to_machine: str
    to_accelerators: list[int]

    @classmethod
    def from_api(cls, data: Json) -> Move:
        return cls(
            deployment=data.get("deployment"),
            copy=data.get("copy"),
            from_machine=str(data["from"]["machine"]),
            from_accelerators=[int(i) for i in data["from"]["accelerators"]],
            to_machine=str(data["to"]["machine"]),
            to_accelerators=[int(i) for i in data["to"]["accelerators"]],
        )


@dataclass(frozen=True)
class FitCheck:
    """How many copies fit now and on the empty cluster, where they would go, and why the
    rest would not. Nothing is reserved by asking."""

    fit_now: int
    fit_empty: int
    suggested_accelerators_per_copy: float | None
    estimate: Estimate
    placed: list[Placed]
    not_placed: list[NotPlaced]
    notices: list[str]
    moves: list[Move] | None = None  # asked with allow_moves: in the order to run them
    moves_words: str = ""

    @property
    def fits(self) -> bool:
        """Every copy asked for would be placed now."""
        return not self.not_placed

    @property
    def reason(self) -> str | None:
        """Why the first copy that would not fit does not: placement's words, or None."""
        return self.not_placed[0].message if self.not_placed else None

    @classmethod
    def from_api(cls, data: Json) -> FitCheck:
        return cls(
            fit_now=int(data["fit_now"]),
            fit_empty=int(data["fit_empty"]),
            suggested_accelerators_per_copy=data.get("suggested_accelerators_per_copy"),
            estimate=Estimate.from_api(data["estimate"]),
            placed=[Placed.from_api(item) for item in data.get("placed", [])],
            not_placed=[NotPlaced.from_api(item) for item in data.get("not_placed", [])],
            notices=[str(notice) for notice in data.get("notices", [])],
            moves=moves_of(data.get("moves")),
            moves_words=str(data.get("moves_words") or ""),
        )


def moves_of(data: Any) -> list[Move] | None:
    return None if data is None else [Move.from_api(item) for item in data]


# --- catalog -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Download:
    """A variant's latest download to this server: its state (queued, downloading, ready,
    failed or must_redownload), how far it got, and why it failed ("" unless it did)."""

    state: str
    revision: str
    progress_gb: float
    size_gb: float
    error: str

    @classmethod
    def from_api(cls, data: Json) -> Download:
        return cls(
            state=str(data["state"]),
            revision=str(data.get("revision", "")),
            progress_gb=float(data.get("progress_gb", 0.0)),
            size_gb=float(data.get("size_gb", 0.0)),
            error=str(data.get("error", "")),
        )


@dataclass(frozen=True)
class Variant:
    """One way to run a model: a precision and a file format. `download` is its latest
    download to this server (None: never asked for)."""

    name: str
    precision: str
    format: str
    size_gb: float
    size_estimated: bool
    engine: str
    min_compute_capability: str | None
    on_this_server: bool
    download: Download | None = None

    @classmethod
    def from_api(cls, data: Json) -> Variant:
        download = data.get("download")
        return cls(
            name=str(data["name"]),
            precision=str(data.get("precision", "")),
            format=str(data.get("format", "")),
            size_gb=float(data.get("size_gb", 0.0)),
            size_estimated=bool(data.get("size_estimated", False)),
            engine=str(data.get("engine", "")),
            min_compute_capability=data.get("min_compute_capability"),
            on_this_server=bool(data.get("on_this_server", False)),
            download=Download.from_api(download) if download else None,
        )


@dataclass(frozen=True)
class Model:
    """A model the console knows, with its variants."""

    id: int
    repo_id: str
    name: str
    family: str
    tasks: list[str]
    max_context: int
    license: str
    gated: bool
    variants: list[Variant]

    @classmethod
    def from_api(cls, data: Json) -> Model:
        return cls(
            id=int(data["id"]),
            repo_id=str(data["repo_id"]),
            name=str(data.get("name", "")),
            family=str(data.get("family", "")),
            tasks=[str(task) for task in data.get("tasks", [])],
            max_context=int(data.get("max_context", 0)),
            license=str(data.get("license", "")),
            gated=bool(data.get("gated", False)),
            variants=[Variant.from_api(variant) for variant in data.get("variants", [])],
        )


# --- clusters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigSlice:
    profile: str
    memory_gb: float


@dataclass(frozen=True)
class Gpu:
    index: int
    vendor: str
    product: str
    memory_gb: float
    compute_capability: str | None
    sharing_class: str
    replicas: int
    mig_slices: list[MigSlice]

    @classmethod
    def from_api(cls, data: Json) -> Gpu:
        return cls(
            index=int(data["index"]),
            vendor=str(data.get("vendor", "")),
            product=str(data.get("product", "")),
            memory_gb=float(data.get("memory_gb", 0.0)),
            compute_capability=data.get("compute_capability"),
            sharing_class=str(data.get("sharing_class", "")),
            replicas=int(data.get("replicas", 1)),
            mig_slices=[
                MigSlice(str(s["profile"]), float(s["memory_gb"]))
                for s in data.get("mig_slices", [])
            ],
        )


@dataclass(frozen=True)
class Machine:
    name: str
    ready: bool
    gpu_count: int
    gpu_memory_gb: float
    gpus: list[Gpu]  # a CPU machine's one accelerator, of vendor "cpu", is no GPU
    cpu_cores: int = 0  # a machine that hosts on its CPU: its cores
    cpu_memory_gb: float = 0.0  # and the memory it gives engines

    @classmethod
    def from_api(cls, data: Json) -> Machine:
        return cls(
            name=str(data["name"]),
            ready=bool(data.get("ready", False)),
            gpu_count=int(data.get("gpu_count", 0)),
            gpu_memory_gb=float(data.get("gpu_memory_gb", 0.0)),
            gpus=[Gpu.from_api(gpu) for gpu in data.get("gpus", [])],
            cpu_cores=int(data.get("cpu_cores", 0)),
            cpu_memory_gb=float(data.get("cpu_memory_gb", 0.0)),
        )


@dataclass(frozen=True)
class Cluster:
    """Where copies can be placed: its machines and GPUs (never its credentials). `free` is
    the free room per machine and GPU, given only when one cluster is asked for."""

    id: int
    name: str
    description: str
    kind: str
    topology: str
    state: str
    sharing_strategy: str | None
    notices: list[str]
    last_seen: datetime | None
    machines: list[Machine]
    free: list[dict[str, Any]] | None = None
    gpu_count: int = 0  # its machines' GPUs together (a CPU is not one)
    cpu_machines: int = 0  # its machines that host on their CPU
    cpu_cores: int = 0  # their cores together
    cpu_memory_gb: float = 0.0  # the memory they give engines

    @classmethod
    def from_api(cls, data: Json) -> Cluster:
        free = data.get("free")
        return cls(
            id=int(data["id"]),
            name=str(data["name"]),
            description=str(data.get("description", "")),
            kind=str(data.get("kind", "")),
            topology=str(data.get("topology", "")),
            state=str(data.get("state", "")),
            sharing_strategy=data.get("sharing_strategy"),
            notices=[str(notice) for notice in data.get("notices", [])],
            last_seen=moment(data.get("last_seen")),
            machines=[Machine.from_api(machine) for machine in data.get("machines", [])],
            free=list(free) if free is not None else None,
            gpu_count=int(data.get("gpu_count", 0)),
            cpu_machines=int(data.get("cpu_machines", 0)),
            cpu_cores=int(data.get("cpu_cores", 0)),
            cpu_memory_gb=float(data.get("cpu_memory_gb", 0.0)),
        )


# --- who you are ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TeamRole:
    team: str
    role: str


@dataclass(frozen=True)
class Identity:
    """Who the API key acts as, and with which roles."""

    username: str
    platform_admin: bool
    teams: list[TeamRole]
    gateway_url: str | None = None

    @classmethod
    def from_api(cls, data: Json) -> Identity:
        return cls(
            username=str(data["username"]),
            platform_admin=bool(data.get("platform_admin", False)),
            teams=[TeamRole(str(t["team"]), str(t["role"])) for t in data.get("teams", [])],
            gateway_url=data.get("gateway_url"),
        )
