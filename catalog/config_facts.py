"""Architecture facts from a Hugging Face config.json, as the catalog stores them.

Pure Python (no Django, no I/O), so the hub reader, the "add from a path" form and the unit tests
share one reading. Each fact comes from the keys vLLM reads (reference/vllm.md §3.2, §6): the
text model's config (`text_config` of multimodal models such as Gemma 3), `head_dim` or
hidden / heads, MLA's latent width, only the full-attention layers when some layers slide, and
no KV cache at all for encoder-only models.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

REQUIRED = ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size")

# What transformers fills in when config.json leaves a key out: upstream files rely on these
# (google/gemma-3-27b-it's text_config has no vocab_size, context or sliding pattern).
MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
    },
    "gemma2": {"sliding_window_pattern": 2},
}
# Encoders: vLLM keeps no KV cache for them (EncoderOnlyAttentionSpec).
ENCODER_TYPES = {
    "bert",
    "roberta",
    "xlm-roberta",
    "deberta",
    "deberta-v2",
    "distilbert",
    "electra",
    "modernbert",
    "nomic_bert",
}
# RoBERTa-style position ids start after the padding index, so fewer tokens fit than positions.
PADDED_POSITION_TYPES = {"roberta", "xlm-roberta"}
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "half": "float16"}


class ConfigError(ValueError):
    """config.json cannot give the facts placement needs; the message says what is missing."""


@dataclass(frozen=True)
class ConfigFacts:
    architecture: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_context: int
    native_dtype: str
    sliding_window: int | None
    global_layers: int | None
    mla: dict[str, int] | None
    encoder_only: bool
    params_total: int
    params_active: int
    quantization: str  # "" or the checkpoint's quant_method (fp8, awq, gptq, mxfp4, …)

    def as_fields(self) -> dict[str, Any]:
        """The Model fields these facts fill (quantization belongs to a variant)."""
        fields = asdict(self)
        fields.pop("quantization")
        return fields


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's settings: a multimodal config nests them under text_config."""
    nested = config.get("text_config")
    text = {**config, **nested} if isinstance(nested, dict) else dict(config)
    defaults = MODEL_TYPE_DEFAULTS.get(str(text.get("model_type", "")), {})
    return {**defaults, **{k: v for k, v in text.items() if v is not None}}


def count(text: dict[str, Any], key: str) -> int:
    value = text.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key} must be a positive whole number, got {value!r}")
    return value


def require(text: dict[str, Any]) -> None:
    missing = [key for key in REQUIRED if key not in text]
    if missing:
        raise ConfigError(
            f"config.json has no {', '.join(missing)} (neither at the top nor in text_config)"
        )


def architecture_of(config: dict[str, Any]) -> str:
    names = config.get("architectures") or []
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise ConfigError("config.json names no architecture (the architectures list is empty)")
    return names[0]


def mla_of(text: dict[str, Any]) -> dict[str, int] | None:
    """DeepSeek's multi-head latent attention caches one latent of this width per layer."""
    if "kv_lora_rank" not in text:
        return None
    return {
        "kv_lora_rank": count(text, "kv_lora_rank"),
        "qk_rope_head_dim": count(text, "qk_rope_head_dim"),
    }


def attention_shape(text: dict[str, Any], mla: dict[str, int] | None) -> tuple[int, int, int]:
    """(attention heads, KV heads, head dim) as vLLM's KV cache spec sees them."""
    heads = count(text, "num_attention_heads")
    if mla is not None:
        # MLAAttentionSpec: one "head" of kv_lora_rank + qk_rope_head_dim, no K/V factor 2.
        return heads, 1, mla["kv_lora_rank"] + mla["qk_rope_head_dim"]
    kv_heads = count(text, "num_key_value_heads") if "num_key_value_heads" in text else heads
    if "head_dim" in text:
        return heads, kv_heads, count(text, "head_dim")
    return heads, kv_heads, count(text, "hidden_size") // heads


def max_context_of(text: dict[str, Any]) -> int:
    positions = count(text, "max_position_embeddings")
    if text.get("model_type") in PADDED_POSITION_TYPES:
        return positions - int(text.get("pad_token_id") or 0) - 1
    return positions


def window_of(text: dict[str, Any]) -> int | None:
    """The sliding window, when some layers really slide (Qwen2 ships one it switches off)."""
    window = text.get("sliding_window")
    if not isinstance(window, int) or window <= 0 or text.get("use_sliding_window") is False:
        return None
    if window >= text.get("max_position_embeddings", window + 1):
        return None  # a window as long as the context is full attention
    return window


def full_attention_layers(text: dict[str, Any], layers: int) -> int:
    """How many layers attend to the whole context when the others slide."""
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        return sum(1 for kind in kinds if kind == "full_attention")
    pattern = text.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0:
        return layers // pattern  # every pattern-th layer is global (Gemma 2/3)
    return 0  # Mistral-v0.1 style: every layer slides


def sliding_facts(text: dict[str, Any], layers: int) -> tuple[int | None, int | None]:
    window = window_of(text)
    if window is None:
        return None, None
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds and "sliding_attention" not in kinds:
        return None, None
    return window, full_attention_layers(text, layers)


def dtype_of(config: dict[str, Any], text: dict[str, Any]) -> str:
    # transformers ≥ 4.56 writes "dtype"; older files say "torch_dtype"; none means bf16.
    named = text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype")
    return DTYPES.get(str(named), "bfloat16")


def quantization_of(config: dict[str, Any], text: dict[str, Any]) -> str:
    quant = config.get("quantization_config") or text.get("quantization_config") or {}
    return str(quant.get("quant_method", "")) if isinstance(quant, dict) else ""


def is_encoder(config: dict[str, Any], text: dict[str, Any]) -> bool:
    return text.get("model_type") in ENCODER_TYPES or config.get("model_type") in ENCODER_TYPES


def read_facts(config: dict[str, Any]) -> ConfigFacts:
    """Every fact the catalog keeps about a model, from its config.json."""
    if not isinstance(config, dict):
        raise ConfigError("config.json is not a JSON object")
    text = text_config(config)
    require(text)
    layers = count(text, "num_hidden_layers")
    mla = mla_of(text)
    heads, kv_heads, head_dim = attention_shape(text, mla)
    window, global_layers = sliding_facts(text, layers)
    total, active = parameter_counts(text)
    return ConfigFacts(
        architecture=architecture_of(config),
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=count(text, "hidden_size"),
        vocab_size=count(text, "vocab_size"),
        max_context=max_context_of(text),
        native_dtype=dtype_of(config, text),
        sliding_window=window,
        global_layers=global_layers,
        mla=mla,
        encoder_only=is_encoder(config, text),
        params_total=total,
        params_active=active,
        quantization=quantization_of(config, text),
    )


# --- parameter counts ------------------------------------------------------------------------
# The hub's safetensors metadata gives the total when it has it; these counts from the shapes
# stand in when it does not, and give the share of parameters a MoE token activates.


def mla_attention_params(text: dict[str, Any]) -> int:
    """DeepSeek's attention: low-rank query and key/value projections around the latent."""
    hidden, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
    nope, rope = int(text.get("qk_nope_head_dim", 128)), int(text["qk_rope_head_dim"])
    v_dim, rank = int(text.get("v_head_dim", 128)), int(text["kv_lora_rank"])
    q_rank = int(text.get("q_lora_rank") or 0)
    query_width = heads * (nope + rope)
    q = hidden * q_rank + q_rank * query_width if q_rank else hidden * query_width
    kv = hidden * (rank + rope) + rank * heads * (nope + v_dim)
    return q + kv + heads * v_dim * hidden


def attention_params(text: dict[str, Any]) -> int:
    if "kv_lora_rank" in text:
        return mla_attention_params(text)
    hidden = int(text["hidden_size"])
    heads = int(text["num_attention_heads"])
    head_dim = int(text.get("head_dim") or hidden // heads)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def experts_of(text: dict[str, Any]) -> tuple[int, int, int]:
    """(routed experts, experts per token, shared experts); (0, 0, 0) for a dense model."""
    keys = ("num_experts", "n_routed_experts", "num_local_experts")
    routed = next((text[key] for key in keys if text.get(key)), 0)
    if not routed:
        return 0, 0, 0
    per_token = text.get("num_experts_per_tok") or text.get("experts_per_token") or 1
    return int(routed), int(per_token), int(text.get("n_shared_experts") or 0)


def mlp_params(text: dict[str, Any]) -> tuple[int, int]:
    """(all, active) feed-forward parameters of the whole stack."""
    hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
    gated = 2 if text.get("model_type") in ENCODER_TYPES else 3  # encoders have no gate
    dense = gated * hidden * int(text.get("intermediate_size") or 4 * hidden)
    routed, per_token, shared = experts_of(text)
    if not routed:
        return dense * layers, dense * layers
    expert = 3 * hidden * int(text.get("moe_intermediate_size") or text["intermediate_size"])
    dense_layers = int(text.get("first_k_dense_replace") or 0)
    moe_layers = layers - dense_layers
    router = hidden * routed
    every = moe_layers * ((routed + shared) * expert + router) + dense_layers * dense
    active = moe_layers * ((per_token + shared) * expert + router) + dense_layers * dense
    return every, active


def parameter_counts(text: dict[str, Any]) -> tuple[int, int]:
    """(total, active) parameters counted from the shapes (norms and biases left out)."""
    hidden, vocab = int(text["hidden_size"]), int(text["vocab_size"])
    embeddings = vocab * hidden * (1 if text.get("tie_word_embeddings", False) else 2)
    if text.get("model_type") in ENCODER_TYPES:
        embeddings = vocab * hidden + int(text.get("max_position_embeddings", 0)) * hidden
    attention = attention_params(text) * int(text["num_hidden_layers"])
    every, active = mlp_params(text)
    return embeddings + attention + every, embeddings + attention + active
