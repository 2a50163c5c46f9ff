"""Frozen dataclasses: what placement is given (an inventory, a request) and what it returns.

Memory is counted in bytes (ints) everywhere in this package; GiB (2**30 bytes) appear only in
the CLI's JSON. Shares of an accelerator are floats here and exact integer millionths inside
the planner, so that three copies of 1/3 never add up to more than one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from placement import shares

GIB = 1 << 30
VENDORS = ("nvidia", "amd", "apple", "cpu")
# The engine programs a copy runs: vLLM, or llama.cpp's server for GGUF files.
RUNTIMES = ("vllm", "llamacpp")
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
)


class Policy(StrEnum):
    BINPACK = "binpack"  # fewest partly-used GPUs; keeps whole GPUs free for large models
    SPREAD = "spread"  # copies on as many machines and GPUs as possible


class ClusterSharing(StrEnum):
    FRACTIONAL = "fractional"  # copies may share a GPU by byte budgets
    WHOLE_GPU = "whole_gpu"  # no sharing strategy: a share below 1 takes a whole GPU


class GpuSharing(StrEnum):
    TIME_SLICED = "time_sliced"
    MPS = "mps"


class NoFitReason(StrEnum):
    INSUFFICIENT_CAPACITY = "insufficient_capacity"
    INSUFFICIENT_SYSTEM_MEMORY = "insufficient_system_memory"
    INSUFFICIENT_GPU_COUNT = "insufficient_gpu_count"
    VENDOR_MISMATCH = "vendor_mismatch"
    ACCEL_VERSION_UNMET = "accel_version_unmet"
    SHARING_NOT_CONFIGURED = "sharing_not_configured"


MAX_COPIES = 10_000
SHARING_NOT_CONFIGURED_NOTICE = "SharingNotConfigured"
HIGH_ENGINE_SHARE_NOTICE = "EngineShareAbove95"


def _check(condition: bool, field: str, problem: str) -> None:
    """Raise a ValueError that starts with the field's name, so callers can prefix a path."""
    if not condition:
        raise ValueError(f"{field}: {problem}")


def is_valid_size(accelerators_per_copy: float) -> bool:
    """0 < s < 1 (a share of one GPU), exactly 1, or a whole number n > 1 (n GPUs, one machine)."""
    size = accelerators_per_copy
    return 0 < size <= 1 or (size > 1 and float(size).is_integer())


# --- the request ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MlaFacts:
    """Multi-head latent attention (DeepSeek V2/V3/R1, Kimi K2): one latent vector per token."""

    kv_lora_rank: int
    qk_rope_head_dim: int

    def __post_init__(self) -> None:
        _check(self.kv_lora_rank > 0, "kv_lora_rank", "must be at least 1")
        _check(self.qk_rope_head_dim >= 0, "qk_rope_head_dim", "must not be negative")


@dataclass(frozen=True)
class ModelFacts:
    """Architecture facts from the model's config.json, plus the checkpoint's size."""

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    hidden_size: int
    vocab_size: int
    max_context: int
    head_dim: int | None = None  # None: hidden_size / attention_heads, as vLLM derives it
    weight_bytes: int | None = None  # the checkpoint's byte size; preferred when known
    parameters: int | None = None  # used with checkpoint_bits when weight_bytes is unknown
    checkpoint_bits: float | None = None  # bits per parameter; None: the engine's dtype
    intermediate_size: int | None = None  # MLP width; None: 4 x hidden_size
    sliding_window: int | None = None
    global_layers: int | None = None  # full-attention layers when sliding_window is set
    mla: MlaFacts | None = None
    encoder_only: bool = False

    def __post_init__(self) -> None:
        for name in ("layers", "attention_heads", "kv_heads", "hidden_size", "vocab_size"):
            _check(getattr(self, name) > 0, name, "must be at least 1")
        _check(self.max_context > 0, "max_context", "must be at least 1")
        _check(self.head_dim is None or self.head_dim > 0, "head_dim", "must be at least 1")
        _check(
            self.weight_bytes is not None or self.parameters is not None,
            "weight_bytes",
            "is missing (give weight_bytes, or parameters)",
        )
        _check(self.weight_bytes is None or self.weight_bytes > 0, "weight_bytes", "must be > 0")
        _check(self.parameters is None or self.parameters > 0, "parameters", "must be > 0")
        bits = self.checkpoint_bits
        _check(bits is None or 0 < bits <= 32, "checkpoint_bits", "must be between 0 and 32")
        size = self.intermediate_size
        _check(size is None or size > 0, "intermediate_size", "must be at least 1")
        window = self.sliding_window
        _check(window is None or window > 0, "sliding_window", "must be at least 1")
        glob = self.global_layers
        _check(
            glob is None or 0 <= glob <= self.layers,
            "global_layers",
            f"must be between 0 and layers ({self.layers})",
        )

    @property
    def effective_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.attention_heads


@dataclass(frozen=True)
class MeasuredRuntime:
    """Non-KV memory that a previous launch of the same engine settings logged.

    vLLM prints its own profile ("torch peak memory increase", "non-torch forward increase",
    "Estimated CUDA graph memory"); when the console has these lines, they replace the model.
    """

    activations_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("activations_bytes", "non_torch_bytes", "cuda_graph_bytes"):
            value = getattr(self, name)
            _check(value is None or value >= 0, name, "must not be negative")


@dataclass(frozen=True)
class EngineSettings:
    """The vLLM settings that decide a copy's memory, and what hardware the engine needs."""

    vendor: str = "nvidia"
    runtime: str = "vllm"  # the engine program (RUNTIMES): each has its own overhead
    max_model_len: int | None = None  # None: the model's max_context
    kv_cache_dtype: str = "auto"
    dtype_bytes: int = 2
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    enforce_eager: bool = False
    min_compute_capability: str | None = None
    min_driver: str | None = None
    gpu_memory_utilization: float | None = None  # None: the default for where a copy lands
    measured: MeasuredRuntime | None = None

    def __post_init__(self) -> None:
        _check(self.vendor in VENDORS, "vendor", f"must be one of {', '.join(VENDORS)}")
        _check(self.runtime in RUNTIMES, "runtime", f"must be one of {', '.join(RUNTIMES)}")
        length = self.max_model_len
        _check(length is None or length > 0, "max_model_len", "must be at least 1")
        _check(self.dtype_bytes in (1, 2, 4), "dtype_bytes", "must be 1, 2 or 4")
        _check(
            self.kv_cache_dtype in KV_CACHE_DTYPES,
            "kv_cache_dtype",
            f"must be one of {', '.join(KV_CACHE_DTYPES)}",
        )
        _check(self.max_num_seqs > 0, "max_num_seqs", "must be at least 1")
        _check(
            self.max_num_batched_tokens >= self.max_num_seqs,
            "max_num_batched_tokens",
            f"must be at least max_num_seqs ({self.max_num_seqs}), as vLLM requires",
        )
        share = self.gpu_memory_utilization
        _check(share is None or 0 < share <= 1, "gpu_memory_utilization", "must be in (0, 1]")


@dataclass(frozen=True)
class PlacementRequest:
    """Place `copies` copies of one size: a share s < 1 of a GPU, 1 GPU, or n GPUs of a machine."""

    model: ModelFacts
    engine: EngineSettings
    accelerators_per_copy: float = 1.0
    copies: int = 1
    policy: Policy = Policy.BINPACK
    # When it does not fit now: look for moves of other copies after which it does.
    allow_moves: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", Policy(self.policy))
        size = self.accelerators_per_copy
        _check(
            is_valid_size(size),
            "accelerators_per_copy",
            f"must be a share between 0 and 1, or a whole number of accelerators, not {size}",
        )
        _check(self.copies >= 0, "copies", "must not be negative")
        # Every copy that does not fit gets its own reason: keep the answer a sane size.
        _check(self.copies <= MAX_COPIES, "copies", f"must be at most {MAX_COPIES}")
        heads = self.model.attention_heads
        _check(
            heads % self.tensor_parallel == 0,
            "accelerators_per_copy",
            f"{self.tensor_parallel} do not divide the model's {heads} attention heads",
        )
        self._check_engine_against_model()

    def _check_engine_against_model(self) -> None:
        _check(
            self.engine.kv_cache_dtype != "fp8_ds_mla" or self.model.mla is not None,
            "engine.kv_cache_dtype",
            "fp8_ds_mla is only for MLA models (DeepSeek)",
        )
        length = self.engine.max_model_len
        _check(
            length is None or length <= self.model.max_context,
            "engine.max_model_len",
            f"{length} is longer than the model's context of {self.model.max_context} tokens",
        )
        share = self.engine.gpu_memory_utilization
        size = self.accelerators_per_copy
        limit = shares.SHARED_LIMIT
        # Neighbours on a shared GPU use some memory outside their budgets (DESIGN §4).
        _check(
            share is None or shares.within_limit(share, size),
            "engine.gpu_memory_utilization",
            f"at most {limit} x the copy's share ({limit * size:.3f}) on a shared accelerator",
        )

    @property
    def tensor_parallel(self) -> int:
        return shares.tensor_parallel(self.accelerators_per_copy)

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len or self.model.max_context


# --- the inventory -------------------------------------------------------------------------


@dataclass(frozen=True)
class MigSlice:
    """One MIG instance of a GPU; a slice holds at most one copy."""

    profile: str  # e.g. "3g.40gb"
    memory_bytes: int
    slice_id: str | None = None  # None: its position in the accelerator's list, as a string

    def __post_init__(self) -> None:
        _check(self.memory_bytes > 0, "memory_bytes", "must be > 0")


@dataclass(frozen=True)
class Accelerator:
    """One GPU (or unified-memory accelerator) as its machine reports it."""

    index: int
    vendor: str
    product: str
    memory_bytes: int  # as the device reports it, not the nameplate
    compute_capability: str | None = None
    driver: str | None = None
    sharing: GpuSharing | None = None
    replicas: int = 1
    mig: tuple[MigSlice, ...] | None = None  # None: MIG off

    def __post_init__(self) -> None:
        if self.sharing is not None:
            object.__setattr__(self, "sharing", GpuSharing(self.sharing))
        _check(self.index >= 0, "index", "must not be negative")
        _check(self.vendor in VENDORS, "vendor", f"must be one of {', '.join(VENDORS)}")
        _check(self.memory_bytes > 0, "memory_bytes", "must be > 0")
        _check(self.replicas >= 1, "replicas", "must be at least 1")
        _check(
            self.mig is None or self.sharing is None,
            "sharing",
            "MIG and time-slicing/MPS cannot be combined on one accelerator",
        )
        ids = self.slice_ids()
        _check(len(set(ids)) == len(ids), "mig", "slice ids must be unique")

    def slice_ids(self) -> tuple[str, ...]:
        return tuple(s.slice_id or str(position) for position, s in enumerate(self.mig or ()))


@dataclass(frozen=True)
class Machine:
    name: str
    accelerators: tuple[Accelerator, ...]
    system_memory_bytes: int = 0
    unified_memory: bool = False  # accelerators use system memory (GB10, Apple)

    def __post_init__(self) -> None:
        _check(bool(self.name), "name", "must not be empty")
        _check(self.system_memory_bytes >= 0, "system_memory_bytes", "must not be negative")
        indexes = [a.index for a in self.accelerators]
        _check(len(set(indexes)) == len(indexes), "accelerators", "indexes must be unique")


@dataclass(frozen=True)
class Reservation:
    """Room held on an accelerator (or one of its MIG slices) by a copy that exists."""

    machine: str
    accelerator: int
    bytes: int
    share: float
    slice: str | None = None  # a slice id, or a MIG profile when only the profile is known
    # A copy of less than one GPU that took a whole one (its cluster shares no GPU): the share it
    # asked for, which is all it would hold if the cluster shared GPUs.
    asked_share: float | None = None
    # Which copy holds it, for re-packing (placement/repack.py): "" for room no move may touch.
    deployment: str = ""
    copy: int = 0
    movable: bool = True

    def __post_init__(self) -> None:
        _check(self.bytes >= 0, "bytes", "must not be negative")
        _check(0 <= self.share <= 1, "share", "must be between 0 and 1")
        if self.asked_share is not None:
            _check(0 < self.asked_share <= 1, "asked_share", "must be above 0 and at most 1")


@dataclass(frozen=True)
class Inventory:
    """A snapshot of one cluster: its machines and the reservations that hold room now."""

    machines: tuple[Machine, ...]
    reservations: tuple[Reservation, ...] = ()
    sharing: ClusterSharing = ClusterSharing.FRACTIONAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "sharing", ClusterSharing(self.sharing))
        names = [m.name for m in self.machines]
        _check(len(set(names)) == len(names), "machines", "names must be unique")

    def empty(self) -> Inventory:
        """The same cluster with nothing running on it."""
        return Inventory(self.machines, (), self.sharing)


# --- the result ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """The memory one copy needs on each of its GPUs, in parts, so the UI can say what takes it."""

    weights_bytes: int
    kv_cache_bytes: int  # one request at max_model_len: vLLM refuses to start without it
    activations_bytes: int
    overhead_bytes: int  # non-torch allocations and CUDA graphs
    kv_bytes_per_token: int  # growth per token of context (full-attention layers only)
    tensor_parallel: int = 1

    @property
    def total_bytes(self) -> int:
        parts = (self.weights_bytes, self.kv_cache_bytes, self.activations_bytes)
        return sum(parts) + self.overhead_bytes


@dataclass(frozen=True)
class Placement:
    """Where one copy goes. `allocated_bytes` is reserved on each accelerator listed."""

    copy: int  # 1-based
    machine: str
    accelerators: tuple[int, ...]
    slice: str | None  # the MIG profile, when the copy runs in a slice
    slice_id: str | None
    allocated_bytes: int
    share: float
    gpu_memory_utilization: float
    hardware_class: str
    sharing_class: str

    def reservations(self) -> tuple[Reservation, ...]:
        """The rows the console writes so that later plans see this copy's room as taken."""
        return tuple(
            Reservation(self.machine, index, self.allocated_bytes, self.share, self.slice_id)
            for index in self.accelerators
        )


@dataclass(frozen=True)
class NotPlaced:
    copy: int
    reason: NoFitReason
    message: str


@dataclass(frozen=True)
class PlanResult:
    estimate: Estimate
    placed: tuple[Placement, ...]
    not_placed: tuple[NotPlaced, ...]
    notices: tuple[str, ...]
    fit_now: int  # copies of this size the cluster has room for now
    fit_empty: int  # ... and with nothing else running
    suggested_accelerators_per_copy: float | None

    def reservations(self) -> tuple[Reservation, ...]:
        return tuple(r for placement in self.placed for r in placement.reservations())
