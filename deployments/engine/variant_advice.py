"""Which variant of a model suits a cluster's hardware, and how much memory each one needs.

Novice mode picks for the operator: no CUDA GPU → the GGUF file on llama.cpp (on a CPU machine
vLLM's CPU build runs the 16- and 32-bit safetensors too, never FP8 or 4-bit); FP8 where the
accelerators run it natively (compute capability 8.9 and up: Ada, Hopper); the full-precision
variant where it fits one accelerator; a 4-bit (AWQ) variant where memory is short. Every variant
gets a line of VRAM guidance: what one copy needs and on how many accelerators it fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.models import Model, Variant
from clusters.models import Accelerator, Cluster
from deployments.engine.context import EngineContext
from deployments.engine.versions import newest
from deployments.placing import vendor_of
from placement.shares import DEFAULT_SHARE
from placement.words import gib

GUIDANCE_CONTEXT = 8_192  # the conversation length VRAM guidance is quoted for
FP8_CAPABILITY = (8, 9)
# What vLLM's CPU build computes in: full-precision weights only (no FP8, AWQ or GPTQ kernels).
CPU_PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Hardware:
    """The accelerators of a cluster, as far as choosing a variant needs them."""

    gpu_memory_bytes: int | None  # the largest accelerator (a MIG slice where only slices)
    product: str
    compute_capability: tuple[int, ...] | None  # the highest among NVIDIA accelerators
    cuda: bool  # an NVIDIA accelerator, which vLLM's CUDA build needs
    gpus_per_machine: int
    gpu_count: int
    cpu: bool = False  # only CPU machines (vendor cpu), which vLLM's CPU build runs on

    @property
    def capability_text(self) -> str:
        return ".".join(map(str, self.compute_capability or ())) or "none"


def capability(text: str | None) -> tuple[int, ...] | None:
    parts = [p for p in (text or "").split(".") if p.isdigit()]
    return tuple(int(p) for p in parts) or None


def hardware_of(cluster: Cluster) -> Hardware:
    rows = list(
        Accelerator.objects.present()
        .filter(machine__cluster=cluster, machine__ready=True)
        .select_related("machine")
    )
    gpus = [row for row in rows if row.parent_id is None]
    split = {row.parent_id for row in rows if row.parent_id}  # MIG: copies go into the slices
    usable = [row for row in rows if row.pk not in split]
    largest = max(usable, key=lambda row: row.memory_bytes, default=None)
    nvidia = [row for row in gpus if row.vendor == "nvidia"]
    per_machine: dict[int, int] = {}
    for row in gpus:
        per_machine[row.machine_id] = per_machine.get(row.machine_id, 0) + 1
    return Hardware(
        gpu_memory_bytes=largest.memory_bytes if largest else None,
        product=largest.product if largest else "",
        compute_capability=max(
            (c for row in nvidia if (c := capability(row.compute_capability))), default=None
        ),
        cuda=bool(nvidia),
        gpus_per_machine=max(per_machine.values(), default=0),
        gpu_count=len(gpus),
        cpu=vendor_of(row.vendor for row in gpus) == "cpu",
    )


@dataclass(frozen=True)
class Advice:
    """VRAM guidance for one variant on one cluster."""

    variant: Variant
    runs: bool  # the engine and number format run on these accelerators
    accelerators: int | None  # the fewest whole accelerators per copy that hold it
    needs_bytes: int  # one copy at GUIDANCE_CONTEXT tokens, on one accelerator
    words: str


def runs_on(variant: Variant, hardware: Hardware) -> bool:
    if variant.engine == "llamacpp":
        return True  # llama.cpp runs on a CPU, or offloads to any GPU it finds
    if hardware.cpu:
        return variant.precision.lower() in CPU_PRECISIONS
    if not hardware.cuda:
        return False
    needed = capability(variant.min_compute_capability)
    return needed is None or (hardware.compute_capability or ()) >= needed


def why_it_cannot_run(variant: Variant, cluster: Cluster) -> str:
    """Why the variant's engine or number format cannot run on the cluster's accelerators at
    all (no size or room would help); "" when it can."""
    hardware = hardware_of(cluster)
    if runs_on(variant, hardware):
        return ""
    return f"{variant.name} cannot run on {cluster.name}: {fit_words(variant, hardware, None)}"


def guidance_length(model: Model, context: int | None) -> int:
    """The conversation length guidance is quoted for: the one asked (the fit check's, so one
    page quotes one length), else GUIDANCE_CONTEXT, never past the model's own."""
    return min(context or GUIDANCE_CONTEXT, model.max_context)


def needs_on(model: Model, variant: Variant, accelerators: int, context: int | None = None) -> int:
    engine = EngineContext(model, variant, newest(), float(accelerators))
    return engine.estimate({"max_model_len": guidance_length(model, context)}).total_bytes


def fewest_accelerators(
    model: Model, variant: Variant, hardware: Hardware, context: int | None = None
) -> int | None:
    if not hardware.gpu_memory_bytes:
        return None
    room = hardware.gpu_memory_bytes * DEFAULT_SHARE
    for count in (1, 2, 4, 8):
        if count > max(hardware.gpus_per_machine, 1) or model.attention_heads % count:
            continue
        if needs_on(model, variant, count, context) <= room:
            return count
    return None


def advise(
    model: Model, variant: Variant, hardware: Hardware, context: int | None = None
) -> Advice:
    needs = needs_on(model, variant, 1, context)
    runs = runs_on(variant, hardware)
    count = fewest_accelerators(model, variant, hardware, context) if runs else None
    quoted = f"About {gib(needs)} per copy at {guidance_length(model, context):,} tokens"
    return Advice(variant, runs, count, needs, f"{quoted}: {fit_words(variant, hardware, count)}")


def fit_words(variant: Variant, hardware: Hardware, count: int | None) -> str:
    if hardware.cpu:
        return cpu_fit_words(variant, hardware, count)
    if variant.engine == "vllm" and not hardware.cuda:
        return "needs an NVIDIA GPU, and this cluster has none."
    if not runs_on(variant, hardware):
        return (
            f"needs compute capability {variant.min_compute_capability}; the accelerators here "
            f"have {hardware.capability_text}."
        )
    if not hardware.gpu_memory_bytes:
        return "runs on the machine's processor (no GPU here)."
    product = hardware.product or "accelerator"
    if count == 1:
        return f"fits one {product} ({gib(hardware.gpu_memory_bytes)})."
    if count:
        return f"needs {count} accelerators per copy ({product}, {gib(hardware.gpu_memory_bytes)})."
    return "does not fit the accelerators of this cluster."


def cpu_fit_words(variant: Variant, hardware: Hardware, count: int | None) -> str:
    if not runs_on(variant, hardware):
        return (
            f"{variant.precision} does not run on vLLM's CPU build (it computes in 16 or 32 "
            "bits): choose a full-precision variant or a GGUF file."
        )
    if count != 1:
        return "does not fit in the memory of the CPU machines of this cluster."
    engine = "llama.cpp" if variant.engine == "llamacpp" else "vLLM's CPU build"
    memory = gib(hardware.gpu_memory_bytes or 0)
    return f"runs on {engine} in the machine's memory ({memory} for engines, no GPU)."


def pick(model: Model, hardware: Hardware) -> tuple[Variant | None, str]:
    """The variant novice mode picks, and why."""
    variants = list(model.variants.all())
    advice = [advise(model, v, hardware) for v in variants]
    if not hardware.cuda:
        gguf = [a for a in advice if a.variant.engine == "llamacpp"]
        if gguf:
            why = "This cluster has no CUDA GPU, so the GGUF file runs on llama.cpp."
            return gguf[0].variant, why
    runnable = [a for a in advice if a.runs and a.variant.engine == "vllm"] or [
        a for a in advice if a.runs
    ]
    if not runnable:
        return (variants[0] if variants else None), "No variant runs on this cluster's hardware."
    return choose(runnable, hardware)


def choose(runnable: list[Advice], hardware: Hardware) -> tuple[Variant, str]:
    one = [a for a in runnable if a.accelerators == 1]
    fp8 = [a for a in one if a.variant.precision.startswith("fp8")]
    if fp8 and (hardware.compute_capability or ()) >= FP8_CAPABILITY:
        why = (
            f"FP8 runs natively on these accelerators (compute capability "
            f"{hardware.capability_text}) and needs about half the memory of 16-bit."
        )
        return fp8[0].variant, why
    full = [a for a in one if not is_quantized(a.variant)]
    if full:
        return full[-1].variant, "It fits one accelerator at full precision."
    if one:
        return one[0].variant, (
            "Memory is short for full precision: this quantized variant fits one accelerator."
        )
    fits = [a for a in runnable if a.accelerators]
    if fits:
        best = min(fits, key=lambda a: (a.accelerators or 0, a.needs_bytes))
        return best.variant, f"It fits when each copy is split over {best.accelerators}."
    smallest = min(runnable, key=lambda a: a.needs_bytes)
    return smallest.variant, "No variant fits these accelerators; this is the smallest."


def is_quantized(variant: Variant) -> bool:
    return variant.precision.lower() not in ("bf16", "fp16", "fp32", "mxfp4")
