"""The CLI's JSON scenario <-> the package's dataclasses.

Every error is a ScenarioError whose message starts with the field's path, e.g.
`request.engine.max_model_len: must be a whole number`. Gigabytes in JSON are GiB (2**30 bytes);
inside they become whole bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from placement.repack import Move, Repack
from placement.types import (
    GIB,
    Accelerator,
    ClusterSharing,
    EngineSettings,
    Estimate,
    GpuSharing,
    Inventory,
    Machine,
    MeasuredRuntime,
    MigSlice,
    MlaFacts,
    ModelFacts,
    NotPlaced,
    Placement,
    PlacementRequest,
    PlanResult,
    Policy,
    Reservation,
)
from placement.words import in_gib

T = TypeVar("T")
Json = dict[str, object]
# Beyond these a number is a typo, and arithmetic on it would overflow floats.
LARGEST_WHOLE_NUMBER = 2**53
LARGEST_GIB = 1e9


class ScenarioError(ValueError):
    """Input that is not a valid scenario; `field` is the JSON path of what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Scenario:
    request: PlacementRequest
    inventory: Inventory | None  # None when only an estimate is wanted


class Fields:
    """One JSON object, read field by field; each error names the field's full path."""

    def __init__(self, value: object, path: str, known: tuple[str, ...]) -> None:
        if not isinstance(value, dict):
            raise ScenarioError(path or "scenario", "must be a JSON object")
        unknown = sorted(str(key) for key in value if key not in known)
        if unknown:
            raise ScenarioError(self._join(path, unknown[0]), "is not a known field")
        self.data: Json = value
        self.path = path

    @staticmethod
    def _join(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def at(self, key: str) -> str:
        return self._join(self.path, key)

    def present(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str) -> object:
        if not self.present(key):
            raise ScenarioError(self.at(key), "is missing")
        return self.data[key]

    def integer(self, key: str, minimum: int | None = None) -> int:
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(self.at(key), "must be a whole number")
        if not float(value).is_integer():
            raise ScenarioError(self.at(key), f"must be a whole number, not {value}")
        if abs(value) > LARGEST_WHOLE_NUMBER:
            raise ScenarioError(self.at(key), f"must be at most {LARGEST_WHOLE_NUMBER}")
        if minimum is not None and value < minimum:
            raise ScenarioError(self.at(key), _at_least(minimum))
        return int(value)

    def optional_integer(self, key: str, minimum: int | None = None) -> int | None:
        return self.integer(key, minimum) if self.present(key) else None

    def number(self, key: str, minimum: float | None = None, above: float | None = None) -> float:
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(self.at(key), "must be a number")
        if not math.isfinite(value):
            raise ScenarioError(self.at(key), "must be a finite number")
        if minimum is not None and value < minimum:
            raise ScenarioError(self.at(key), f"must be at least {minimum:g}")
        if above is not None and value <= above:
            raise ScenarioError(self.at(key), f"must be greater than {above:g}")
        return float(value)

    def optional_number(self, key: str, minimum: float | None = None) -> float | None:
        return self.number(key, minimum) if self.present(key) else None

    def gib_bytes(self, key: str, positive: bool = False) -> int:
        gigabytes = self.number(key, above=0.0) if positive else self.number(key, minimum=0.0)
        if gigabytes > LARGEST_GIB:
            raise ScenarioError(self.at(key), f"must be at most {LARGEST_GIB:g} GiB")
        return round(gigabytes * GIB)

    def optional_gib_bytes(self, key: str) -> int | None:
        return self.gib_bytes(key) if self.present(key) else None

    def string(self, key: str, choices: tuple[str, ...] | None = None) -> str:
        value = self.raw(key)
        if not isinstance(value, str) or not value:
            raise ScenarioError(self.at(key), "must be a non-empty string")
        if choices is not None and value not in choices:
            raise ScenarioError(self.at(key), f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    def optional_string(self, key: str, choices: tuple[str, ...] | None = None) -> str | None:
        return self.string(key, choices) if self.present(key) else None

    def version(self, key: str) -> str | None:
        """A version such as "9.0" or "550.90.07"; a bare number is read as its text."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ScenarioError(self.at(key), 'must be a version string such as "8.0"')
        return str(value)

    def boolean(self, key: str, default: bool) -> bool:
        if not self.present(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise ScenarioError(self.at(key), "must be true or false")
        return value

    def items(self, key: str) -> list[object]:
        value = self.raw(key)
        if not isinstance(value, list):
            raise ScenarioError(self.at(key), "must be a list")
        return value

    def optional_items(self, key: str) -> list[object]:
        return self.items(key) if self.present(key) else []


def _at_least(minimum: int) -> str:
    return "must not be negative" if minimum == 0 else f"must be at least {minimum}"


def build(path: str, make: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a dataclass constructor, turning its "field: problem" ValueError into a path."""
    try:
        return make(*args, **kwargs)
    except ValueError as error:
        field, _, problem = str(error).partition(": ")
        raise ScenarioError(f"{path}.{field}" if path else field, problem or str(error)) from None


# --- JSON -> dataclasses ---------------------------------------------------------------------

MODEL_FIELDS = (
    "name",
    "layers",
    "attention_heads",
    "kv_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "max_context",
    "weight_bytes",
    "parameters",
    "checkpoint_bits",
    "intermediate_size",
    "sliding_window",
    "global_layers",
    "mla",
    "encoder_only",
)


def mla_from_json(f: Fields) -> MlaFacts | None:
    if not f.present("mla"):
        return None
    m = Fields(f.data["mla"], f.at("mla"), ("kv_lora_rank", "qk_rope_head_dim"))
    return build(m.path, MlaFacts, m.integer("kv_lora_rank", 1), m.integer("qk_rope_head_dim", 0))


def model_from_json(value: object, path: str) -> ModelFacts:
    f = Fields(value, path, MODEL_FIELDS)
    return build(
        path,
        ModelFacts,
        name=f.string("name"),
        layers=f.integer("layers", 1),
        attention_heads=f.integer("attention_heads", 1),
        kv_heads=f.integer("kv_heads", 1),
        hidden_size=f.integer("hidden_size", 1),
        vocab_size=f.integer("vocab_size", 1),
        max_context=f.integer("max_context", 1),
        head_dim=f.optional_integer("head_dim", 1),
        weight_bytes=f.optional_integer("weight_bytes", 1),
        parameters=f.optional_integer("parameters", 1),
        checkpoint_bits=f.optional_number("checkpoint_bits", 0.0),
        intermediate_size=f.optional_integer("intermediate_size", 1),
        sliding_window=f.optional_integer("sliding_window", 1),
        global_layers=f.optional_integer("global_layers", 0),
        mla=mla_from_json(f),
        encoder_only=f.boolean("encoder_only", False),
    )


ENGINE_FIELDS = (
    "vendor",
    "min_compute_capability",
    "max_model_len",
    "kv_cache_dtype",
    "dtype_bytes",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "min_driver",
    "gpu_memory_utilization",
    "measured",
)
MEASURED_FIELDS = ("activations_gb", "non_torch_gb", "cuda_graph_gb")


def engine_from_json(value: object, path: str) -> EngineSettings:
    f = Fields(value, path, ENGINE_FIELDS)
    defaults = EngineSettings()
    measured = None
    if f.present("measured"):
        m = Fields(f.data["measured"], f.at("measured"), MEASURED_FIELDS)
        parts = [m.optional_gib_bytes(key) for key in MEASURED_FIELDS]
        measured = build(m.path, MeasuredRuntime, *parts)

    def integer_or(key: str, default: int, minimum: int = 1) -> int:
        value = f.optional_integer(key, minimum)
        return default if value is None else value

    share = f.optional_number("gpu_memory_utilization")
    return build(
        path,
        EngineSettings,
        vendor=f.string("vendor"),
        max_model_len=f.optional_integer("max_model_len", 1),
        kv_cache_dtype=f.optional_string("kv_cache_dtype") or defaults.kv_cache_dtype,
        dtype_bytes=integer_or("dtype_bytes", defaults.dtype_bytes),
        max_num_seqs=integer_or("max_num_seqs", defaults.max_num_seqs),
        max_num_batched_tokens=integer_or(
            "max_num_batched_tokens", defaults.max_num_batched_tokens
        ),
        enforce_eager=f.boolean("enforce_eager", defaults.enforce_eager),
        min_compute_capability=f.version("min_compute_capability"),
        min_driver=f.version("min_driver"),
        gpu_memory_utilization=share,
        measured=measured,
    )


REQUEST_FIELDS = ("model", "engine", "accelerators_per_copy", "copies", "allow_moves")


def request_from_json(value: object, path: str, policy: Policy) -> PlacementRequest:
    f = Fields(value, path, REQUEST_FIELDS)
    model = model_from_json(f.raw("model"), f.at("model"))
    engine = engine_from_json(f.raw("engine"), f.at("engine"))
    size = f.number("accelerators_per_copy", above=0.0)
    copies = f.integer("copies", 0)
    moves = f.boolean("allow_moves", False)
    return build(path, PlacementRequest, model, engine, size, copies, policy, moves)


ACCELERATOR_FIELDS = (
    "index",
    "vendor",
    "product",
    "memory_gb",
    "compute_capability",
    "driver",
    "sharing",
    "replicas",
    "mig",
)
SHARING_CHOICES = tuple(s.value for s in GpuSharing)


def mig_slice_from_json(value: object, path: str) -> MigSlice:
    f = Fields(value, path, ("profile", "memory_gb", "id"))
    profile, memory, slice_id = f.string("profile"), f.gib_bytes("memory_gb", True), None
    if f.present("id"):
        slice_id = str(f.version("id"))
    return build(path, MigSlice, profile, memory, slice_id)


def accelerator_from_json(value: object, path: str) -> Accelerator:
    f = Fields(value, path, ACCELERATOR_FIELDS)
    mig = None
    if "mig" in f.data:
        mig = tuple(
            mig_slice_from_json(item, f"{f.at('mig')}[{i}]")
            for i, item in enumerate(f.optional_items("mig"))
        )
    sharing = f.optional_string("sharing", SHARING_CHOICES)
    return build(
        path,
        Accelerator,
        index=f.integer("index", 0),
        vendor=f.string("vendor"),
        product=f.optional_string("product") or "",
        memory_bytes=f.gib_bytes("memory_gb", True),
        compute_capability=f.version("compute_capability"),
        driver=f.version("driver"),
        sharing=GpuSharing(sharing) if sharing else None,
        replicas=f.optional_integer("replicas", 1) or 1,
        mig=mig,
    )


def machine_from_json(value: object, path: str) -> Machine:
    f = Fields(value, path, ("name", "system_memory_gb", "unified_memory", "accelerators"))
    name = f.string("name")
    accelerators = tuple(
        accelerator_from_json(item, f"{f.at('accelerators')}[{i}]")
        for i, item in enumerate(f.items("accelerators"))
    )
    system = f.gib_bytes("system_memory_gb") if f.present("system_memory_gb") else 0
    unified = f.boolean("unified_memory", False)
    if unified and not system:
        raise ScenarioError(f.at("system_memory_gb"), "is needed for a unified-memory machine")
    return build(path, Machine, name, accelerators, system, unified)


RESERVATION_FIELDS = ("machine", "accelerator", "gb", "share", "slice", "deployment", "copy",
                      "movable")  # fmt: skip


def reservation_from_json(value: object, path: str, machines: dict[str, Machine]) -> Reservation:
    f = Fields(value, path, RESERVATION_FIELDS)
    name = f.string("machine")
    if name not in machines:
        raise ScenarioError(f.at("machine"), f"no machine is named {name!r}")
    index = f.integer("accelerator", 0)
    accelerator = next((a for a in machines[name].accelerators if a.index == index), None)
    if accelerator is None:
        raise ScenarioError(f.at("accelerator"), f"{name} has no accelerator {index}")
    slice_name = f.version("slice")
    if slice_name is not None:
        _check_slice(f.at("slice"), accelerator, slice_name)
    gb, share = f.gib_bytes("gb"), f.number("share", minimum=0.0)
    # Re-packing names the copy that holds the room, and may forbid moving it.
    deployment = f.optional_string("deployment") or ""
    copy = f.integer("copy", 0) if deployment else 0
    if f.present("copy") and not deployment:
        raise ScenarioError(f.at("copy"), "needs the deployment it is a copy of")
    movable = f.boolean("movable", True)
    return build(
        path, Reservation, name, index, gb, share, slice_name, None, deployment, copy, movable
    )


def _check_slice(path: str, accelerator: Accelerator, slice_name: str) -> None:
    if accelerator.mig is None:
        raise ScenarioError(path, f"accelerator {accelerator.index} has no MIG slices")
    profiles = {s.profile for s in accelerator.mig}
    if slice_name not in profiles and slice_name not in accelerator.slice_ids():
        raise ScenarioError(path, f"accelerator {accelerator.index} has no slice {slice_name!r}")


def inventory_from_json(value: object, path: str) -> Inventory:
    f = Fields(value, path, ("sharing", "machines", "reservations"))
    sharing = f.optional_string("sharing", tuple(s.value for s in ClusterSharing))
    machines = tuple(
        machine_from_json(item, f"{f.at('machines')}[{i}]")
        for i, item in enumerate(f.items("machines"))
    )
    named = {m.name: m for m in machines}
    if len(named) != len(machines):
        raise ScenarioError(f.at("machines"), "machine names must be unique")
    reservations = tuple(
        reservation_from_json(item, f"{f.at('reservations')}[{i}]", named)
        for i, item in enumerate(f.optional_items("reservations"))
    )
    cluster_sharing = ClusterSharing(sharing or ClusterSharing.FRACTIONAL)
    return build(path, Inventory, machines, reservations, cluster_sharing)


def scenario_from_json(value: object, need_cluster: bool = True) -> Scenario:
    """A whole scenario; the cluster may be left out when only an estimate is wanted."""
    f = Fields(value, "", ("policy", "cluster", "request"))
    policy = Policy(f.optional_string("policy", tuple(p.value for p in Policy)) or Policy.BINPACK)
    request = request_from_json(f.raw("request"), "request", policy)
    inventory = None
    if need_cluster or f.present("cluster"):
        inventory = inventory_from_json(f.raw("cluster"), "cluster")
    return Scenario(request, inventory)


# --- dataclasses -> JSON ---------------------------------------------------------------------


def size_json(size: float) -> float | int:
    return int(size) if float(size).is_integer() else size


def estimate_to_json(estimate: Estimate) -> Json:
    return {
        "weights_gb": in_gib(estimate.weights_bytes),
        "kv_cache_gb": in_gib(estimate.kv_cache_bytes),
        "activations_gb": in_gib(estimate.activations_bytes),
        "overhead_gb": in_gib(estimate.overhead_bytes),
        "total_gb": in_gib(estimate.total_bytes),
        "kv_bytes_per_token": estimate.kv_bytes_per_token,
        "tensor_parallel": estimate.tensor_parallel,
    }


def placement_to_json(placement: Placement) -> Json:
    return {
        "copy": placement.copy,
        "machine": placement.machine,
        "accelerators": list(placement.accelerators),
        "slice": placement.slice,
        "slice_id": placement.slice_id,
        "allocated_capacity_gb": in_gib(placement.allocated_bytes),
        "share": round(placement.share, 4),
        "gpu_memory_utilization": placement.gpu_memory_utilization,
        "hardware_class": placement.hardware_class,
        "sharing_class": placement.sharing_class,
    }


def not_placed_to_json(item: NotPlaced) -> Json:
    return {"copy": item.copy, "reason": item.reason.value, "message": item.message}


def move_to_json(move: Move) -> Json:
    return {
        "deployment": move.deployment,
        "copy": move.copy,
        "from": {"machine": move.from_machine, "accelerators": list(move.from_accelerators)},
        "to": {"machine": move.to_machine, "accelerators": list(move.to_accelerators)},
        "gb": in_gib(move.bytes),
    }


def repack_to_json(repack: Repack) -> Json:
    """A plan that may move other copies first: `moves` in the order to run them."""
    data = result_to_json(repack.result)
    data["moves"] = [move_to_json(move) for move in repack.moves]
    if not repack.found:
        data["moves_message"] = repack.message
    return data


def result_to_json(result: PlanResult) -> Json:
    suggested = result.suggested_accelerators_per_copy
    return {
        "estimate": estimate_to_json(result.estimate),
        "placed": [placement_to_json(p) for p in result.placed],
        "not_placed": [not_placed_to_json(n) for n in result.not_placed],
        "notices": list(result.notices),
        "fit_now": result.fit_now,
        "fit_empty": result.fit_empty,
        "suggested_accelerators_per_copy": None if suggested is None else size_json(suggested),
    }


def _exact_gib(value: int) -> float:
    # Not rounded: bytes / 2**30 is exact in a float, so a scenario survives a round trip.
    return value / GIB


def _without_none(data: Json) -> Json:
    return {key: value for key, value in data.items() if value is not None}


def model_to_json(model: ModelFacts) -> Json:
    data: Json = {key: getattr(model, key) for key in MODEL_FIELDS if key != "mla"}
    if model.mla is not None:
        data["mla"] = {
            "kv_lora_rank": model.mla.kv_lora_rank,
            "qk_rope_head_dim": model.mla.qk_rope_head_dim,
        }
    return _without_none(data)


def engine_to_json(engine: EngineSettings) -> Json:
    data: Json = {key: getattr(engine, key) for key in ENGINE_FIELDS if key != "measured"}
    if engine.measured is not None:
        parts = (
            engine.measured.activations_bytes,
            engine.measured.non_torch_bytes,
            engine.measured.cuda_graph_bytes,
        )
        data["measured"] = _without_none(
            {
                key: None if part is None else _exact_gib(part)
                for key, part in zip(MEASURED_FIELDS, parts, strict=True)
            }
        )
    return _without_none(data)


def accelerator_to_json(accelerator: Accelerator) -> Json:
    data: Json = {
        "index": accelerator.index,
        "vendor": accelerator.vendor,
        "product": accelerator.product,
        "memory_gb": _exact_gib(accelerator.memory_bytes),
        "compute_capability": accelerator.compute_capability,
        "driver": accelerator.driver,
        "sharing": accelerator.sharing.value if accelerator.sharing else None,
        "replicas": accelerator.replicas,
    }
    if accelerator.mig is not None:
        data["mig"] = [
            _without_none(
                {"profile": s.profile, "memory_gb": _exact_gib(s.memory_bytes), "id": s.slice_id}
            )
            for s in accelerator.mig
        ]
    return _without_none(data)


def reservation_to_json(reservation: Reservation) -> Json:
    data = _without_none(
        {
            "machine": reservation.machine,
            "accelerator": reservation.accelerator,
            "gb": _exact_gib(reservation.bytes),
            "share": reservation.share,
            "slice": reservation.slice,
        }
    )
    if reservation.deployment:  # the copy holding it, for re-packing
        data.update(deployment=reservation.deployment, copy=reservation.copy)
        if not reservation.movable:
            data["movable"] = False
    return data


def inventory_to_json(inventory: Inventory) -> Json:
    machines = [
        {
            "name": m.name,
            "system_memory_gb": _exact_gib(m.system_memory_bytes),
            "unified_memory": m.unified_memory,
            "accelerators": [accelerator_to_json(a) for a in m.accelerators],
        }
        for m in inventory.machines
    ]
    reservations = [reservation_to_json(r) for r in inventory.reservations]
    return {"sharing": inventory.sharing.value, "machines": machines, "reservations": reservations}


def scenario_to_json(scenario: Scenario) -> Json:
    request = scenario.request
    asked: Json = {
        "model": model_to_json(request.model),
        "engine": engine_to_json(request.engine),
        "accelerators_per_copy": size_json(request.accelerators_per_copy),
        "copies": request.copies,
    }
    if request.allow_moves:
        asked["allow_moves"] = True
    data: Json = {"policy": request.policy.value, "request": asked}
    if scenario.inventory is not None:
        data["cluster"] = inventory_to_json(scenario.inventory)
    return data
