"""Models and clusters the placement tests share (plain functions and constants, no fixtures).

Model facts come from reference/vllm.md §6 (vendored HF config.json copies) unless noted.
"""

from __future__ import annotations

from placement import (
    GIB,
    Accelerator,
    ClusterSharing,
    EngineSettings,
    Inventory,
    Machine,
    MigSlice,
    MlaFacts,
    ModelFacts,
    PlacementRequest,
    Policy,
    Reservation,
)

# Meta-Llama-3-8B and Llama-3.1-8B: 8,030,261,248 parameters in bf16.
LLAMA_8B_CHECKPOINT_BYTES = 16_060_522_496

LLAMA_3_1_8B = ModelFacts(
    name="meta-llama/Llama-3.1-8B-Instruct",
    layers=32,
    attention_heads=32,
    kv_heads=8,
    hidden_size=4096,
    vocab_size=128256,
    max_context=131072,
    intermediate_size=14336,
    weight_bytes=LLAMA_8B_CHECKPOINT_BYTES,
)
META_LLAMA_3_8B = ModelFacts(
    name="meta-llama/Meta-Llama-3-8B",
    layers=32,
    attention_heads=32,
    kv_heads=8,
    hidden_size=4096,
    vocab_size=128256,
    max_context=8192,
    intermediate_size=14336,
    weight_bytes=LLAMA_8B_CHECKPOINT_BYTES,
)
QWEN3_0_6B = ModelFacts(
    name="Qwen/Qwen3-0.6B",
    layers=28,
    attention_heads=16,
    kv_heads=8,
    head_dim=128,
    hidden_size=1024,
    vocab_size=151936,
    max_context=40960,
    parameters=600_000_000,
)
QWEN3_8B = ModelFacts(
    name="Qwen/Qwen3-8B",
    layers=36,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    vocab_size=151936,
    max_context=40960,
    weight_bytes=16_381_470_720,
)
QWEN3_32B = ModelFacts(
    name="Qwen/Qwen3-32B",
    layers=64,
    attention_heads=64,
    kv_heads=8,
    head_dim=128,
    hidden_size=5120,
    vocab_size=151936,
    max_context=40960,
    parameters=32_800_000_000,
)
QWEN3_30B_A3B = ModelFacts(
    name="Qwen/Qwen3-30B-A3B",
    layers=48,
    attention_heads=32,
    kv_heads=4,
    head_dim=128,
    hidden_size=2048,
    vocab_size=151936,
    max_context=40960,
    parameters=30_500_000_000,
)
LLAMA_3_3_70B = ModelFacts(
    name="meta-llama/Llama-3.3-70B-Instruct",
    layers=80,
    attention_heads=64,
    kv_heads=8,
    hidden_size=8192,
    vocab_size=128256,
    max_context=131072,
    parameters=70_600_000_000,
)
MISTRAL_SMALL_24B = ModelFacts(
    name="mistralai/Mistral-Small-24B-Instruct-2501",
    layers=40,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    hidden_size=5120,
    vocab_size=131072,
    max_context=32768,
    parameters=23_570_000_000,
)
GEMMA_3_27B = ModelFacts(
    name="google/gemma-3-27b-it",
    layers=62,
    attention_heads=32,
    kv_heads=16,
    head_dim=128,
    hidden_size=5376,
    vocab_size=262208,
    max_context=131072,
    parameters=27_400_000_000,
    sliding_window=1024,
    global_layers=10,
)
# google/gemma-3-4b-it config.json: every 6th of 34 layers is global (5), window 1024.
GEMMA_3_4B = ModelFacts(
    name="google/gemma-3-4b-it",
    layers=34,
    attention_heads=8,
    kv_heads=4,
    head_dim=256,
    hidden_size=2560,
    vocab_size=262208,
    max_context=131072,
    intermediate_size=10240,
    parameters=4_300_079_472,
    checkpoint_bits=16,
    sliding_window=1024,
    global_layers=5,
)
GPT_OSS_20B = ModelFacts(
    name="openai/gpt-oss-20b",
    layers=24,
    attention_heads=64,
    kv_heads=8,
    head_dim=64,
    hidden_size=2880,
    vocab_size=201088,
    max_context=131072,
    weight_bytes=13_761_264_768,
    sliding_window=128,
    global_layers=12,
)
GPT_OSS_120B = ModelFacts(
    name="openai/gpt-oss-120b",
    layers=36,
    attention_heads=64,
    kv_heads=8,
    head_dim=64,
    hidden_size=2880,
    vocab_size=201088,
    max_context=131072,
    parameters=117_000_000_000,
    checkpoint_bits=4.25,
    sliding_window=128,
    global_layers=18,
)
PHI_4 = ModelFacts(
    name="microsoft/phi-4",
    layers=40,
    attention_heads=40,
    kv_heads=10,
    head_dim=128,
    hidden_size=5120,
    vocab_size=100352,
    max_context=16384,
    weight_bytes=29_319_004_160,  # llm-cal: the safetensors header says 27.31 GiB
)
R1_DISTILL_QWEN_7B = ModelFacts(
    name="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    layers=28,
    attention_heads=28,
    kv_heads=4,
    head_dim=128,
    hidden_size=3584,
    vocab_size=152064,
    max_context=131072,
    parameters=7_600_000_000,
)
DEEPSEEK_V3 = ModelFacts(
    name="deepseek-ai/DeepSeek-V3",
    layers=61,
    attention_heads=128,
    kv_heads=128,
    hidden_size=7168,
    vocab_size=129280,
    max_context=163840,
    parameters=671_000_000_000,
    checkpoint_bits=8,
    mla=MlaFacts(kv_lora_rank=512, qk_rope_head_dim=64),
)
BGE_M3 = ModelFacts(
    name="BAAI/bge-m3",
    layers=24,
    attention_heads=16,
    kv_heads=16,
    head_dim=64,
    hidden_size=1024,
    vocab_size=250002,
    max_context=8194,
    parameters=568_000_000,
    checkpoint_bits=32,
    encoder_only=True,
)

NVIDIA = EngineSettings(vendor="nvidia", max_model_len=8192)

H100_BYTES = round(79.2 * GIB)
A100_40_BYTES = round(39.5 * GIB)


def gib(value: float) -> int:
    return round(value * GIB)


def h100(index: int, **changes: object) -> Accelerator:
    facts: dict[str, object] = dict(
        index=index,
        vendor="nvidia",
        product="NVIDIA-H100-80GB-HBM3",
        memory_bytes=H100_BYTES,
        compute_capability="9.0",
        driver="550.90.07",
    )
    facts.update(changes)
    return Accelerator(**facts)  # type: ignore[arg-type]


def h100_mig(index: int) -> Accelerator:
    """An H100 in the `all-balanced` MIG layout: 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb."""
    slices = (
        MigSlice("1g.10gb", gib(9.75), "a"),
        MigSlice("1g.10gb", gib(9.75), "b"),
        MigSlice("2g.20gb", gib(19.5), "c"),
        MigSlice("3g.40gb", gib(39.25), "d"),
    )
    return h100(index, mig=slices)


def machine(name: str, *accelerators: Accelerator, **changes: object) -> Machine:
    return Machine(name, tuple(accelerators), gib(512), **changes)  # type: ignore[arg-type]


def h100_machine(name: str, gpus: int, **gpu_changes: object) -> Machine:
    return machine(name, *(h100(i, **gpu_changes) for i in range(gpus)))


def cluster(
    *machines: Machine,
    reservations: tuple[Reservation, ...] = (),
    sharing: ClusterSharing = ClusterSharing.FRACTIONAL,
) -> Inventory:
    return Inventory(tuple(machines), reservations, sharing)


def request(
    model: ModelFacts = QWEN3_8B,
    size: float = 1.0,
    copies: int = 1,
    policy: Policy = Policy.BINPACK,
    **engine_changes: object,
) -> PlacementRequest:
    facts: dict[str, object] = dict(vendor="nvidia", max_model_len=8192)
    facts.update(engine_changes)
    engine = EngineSettings(**facts)  # type: ignore[arg-type]
    return PlacementRequest(model, engine, size, copies, policy)


def reserve(machine_name: str, index: int, share: float, memory: int = H100_BYTES) -> Reservation:
    """What an earlier copy of `share` of a GPU reserved."""
    return Reservation(machine_name, index, int(share * memory), share)
