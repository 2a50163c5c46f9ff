"""A tiny random-weight Llama that both real engines load: safetensors for vLLM, GGUF for llama.cpp.

Pure Python (no Django), with only numpy, safetensors, tokenizers and gguf: no torch, no
transformers, no download. Every byte is a function of the constants below (fixed seed, fixed
corpus, sorted JSON keys, no timestamps), so two runs write identical files and the end-to-end
tests can start vLLM and llama-server on a model no network had to provide.

The GGUF holds the same weights as the safetensors, written the way llama.cpp's
convert_hf_to_gguf.py writes a Llama: its tensor names, its hyper-parameter keys, and the query
and key rows permuted from Hugging Face's rotate-half layout to llama.cpp's interleaved one. At
temperature 0 both engines therefore pick the same first tokens for the same prompt.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 20261201
ARCHITECTURE = "LlamaForCausalLM"
REPO_ID = "berth/tiny-llama"
NAME = "tiny-llama"
CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
GGUF_FILE = "tiny-llama-f32.gguf"

VOCAB_SIZE = 512  # the tokenizer's; a shape's embedding may have more rows (Qwen's do)
MAX_CONTEXT = 2048
RMS_NORM_EPS = 1e-5
ROPE_THETA = 10000.0
# Small weights keep activations tame; query and key weights are larger so that attention is
# not uniform and the rotary layout (hence the GGUF permutation) changes what is generated.
WEIGHT_STD = 0.02
QUERY_KEY_STD = 0.08


@dataclass(frozen=True)
class Shape:
    """The dimensions of the random Llama; the tokenizer is the same for every shape."""

    vocab_size: int = VOCAB_SIZE
    hidden_size: int = 256
    intermediate_size: int = 512
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64  # vLLM's CPU attention kernels support only some head sizes; 64 is one
    max_context: int = MAX_CONTEXT
    tie_word_embeddings: bool = False


TINY = Shape()
# Qwen3-0.6B's dimensions (its config.json: 28 layers, 16 query and 8 key-value heads of 128,
# 151,936 embedding rows tied to the LM head), in a plain Llama (no per-head q/k norms): the
# memory benchmark's model of a real size. Only safetensors: llama.cpp wants as many
# embedding rows as the tokenizer has tokens.
QWEN3_0_6B = Shape(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    layers=28,
    heads=16,
    kv_heads=8,
    head_dim=128,
    max_context=40960,
    tie_word_embeddings=True,
)

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (BOS, EOS, IM_START, IM_END)  # the trainer gives them ids 0..3, in this order
BOS_ID, EOS_ID, IM_START_ID, IM_END_ID = range(len(SPECIAL_TOKENS))

# ChatML. No bos_token in it and none added by the tokenizer: vLLM and llama.cpp then turn the
# same conversation into the same token ids. One line with `{%-`, so Jinja renders it the same
# with or without trim_blocks (transformers sets it, llama.cpp's minja does not).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Enough distinct English for 252 merges on top of the 256 bytes and the 4 special tokens.
CORPUS = (
    "Berth is a console that hosts large language models on your own machines. An operator "
    "picks a model, a cluster and the size of each copy; Berth checks that it fits, places "
    "every copy, starts the engine, watches it until it serves, and routes chat traffic to it.",
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a "
    "single step. All that glitters is not gold, and not all those who wander are lost.",
    "Hello! How are you today? I am fine, thank you. What would you like to talk about? We "
    "could talk about the weather, the news, books, music, cooking or the history of science.",
    "In the beginning the servers were quiet. Then the requests came, first a few and then "
    "many, and the copies of the model answered them one token at a time, streaming each word "
    "back to the people who had asked, until the queue was empty again.",
    "Numbers matter too: 1, 2, 3, 10, 42, 100, 2048 and 65536 are all written with digits. "
    "Dates such as 2026-12-01 and times such as 10:15 appear in logs, next to words like "
    "error, warning, info, ready, failed, started and stopped.",
    "A good answer is short, true and kind. The assistant reads the question, thinks about "
    "what the user needs, and writes a reply in plain words. When it does not know, it says so "
    "and suggests where the answer might be found.",
    "Memory is measured in bytes, kibibytes, mebibytes and gibibytes. A graphics card with "
    "eighty gibibytes of memory can hold the weights of a large model, its key and value cache, "
    "and the activations of the requests it is working on at the same moment.",
    "system user assistant message content role: The user said hello, and the assistant "
    "replied with a friendly greeting, asking what it could help with on this fine morning.",
)


@dataclass(frozen=True)
class TinyModel:
    """What write_tiny_model wrote: the architecture facts and every file with its size."""

    folder: Path
    architecture: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_context: int
    params_total: int
    files: tuple[tuple[str, int], ...]  # (name, bytes), sorted by name
    safetensors_file: str
    gguf_file: str  # "" where none was written

    def size_of(self, name: str) -> int:
        return dict(self.files)[name]


# --- config and tokenizer files ---------------------------------------------------------------


def hf_config(shape: Shape = TINY) -> dict[str, Any]:
    """config.json as transformers writes it for a LlamaForCausalLM."""
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_context,
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_theta": ROPE_THETA,
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": WEIGHT_STD,
        "pretraining_tp": 1,
        "tie_word_embeddings": shape.tie_word_embeddings,
        "torch_dtype": "float32",
        "use_cache": True,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
    }


def tokenizer_config(shape: Shape = TINY) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": shape.max_context,
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map() -> dict[str, Any]:
    return {"bos_token": BOS, "eos_token": EOS, "additional_special_tokens": [IM_START, IM_END]}


def generation_config() -> dict[str, Any]:
    # A chat turn ends at <|im_end|>; plain text at <|end_of_text|>.
    return {"bos_token_id": BOS_ID, "eos_token_id": [EOS_ID, IM_END_ID], "do_sample": False}


def train_tokenizer() -> Tokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer, which llama.cpp calls "gpt-2") of VOCAB_SIZE."""
    # The trainer breaks ties by the pair itself, so threads do not change the result (five
    # runs with them on gave one file). Off all the same, so that a process that forks later
    # (a Celery worker) gets no "parallelism has already been used" warning or deadlock.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"the corpus gave {tokenizer.get_vocab_size()} tokens, not {VOCAB_SIZE}")
    return tokenizer


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """Every token's text, by id."""
    by_id = {index: text for text, index in tokenizer.get_vocab().items()}
    return [by_id[index] for index in range(len(by_id))]


def merges(tokenizer: Tokenizer) -> list[str]:
    """The BPE merges as "left right" (tokenizers ≥ 0.20 saves them as pairs, GGUF as strings)."""
    saved = json.loads(tokenizer.to_str())["model"]["merges"]
    return [pair if isinstance(pair, str) else " ".join(pair) for pair in saved]


# --- weights ----------------------------------------------------------------------------------


def normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def layer_weights(rng: np.random.Generator, layer: int, shape: Shape) -> dict[str, np.ndarray]:
    """One decoder layer in Hugging Face's names and [out, in] shapes."""
    q_rows, kv_rows = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    hidden, width = shape.hidden_size, shape.intermediate_size
    prefix = f"model.layers.{layer}"
    return {
        f"{prefix}.self_attn.q_proj.weight": normal(rng, (q_rows, hidden), QUERY_KEY_STD),
        f"{prefix}.self_attn.k_proj.weight": normal(rng, (kv_rows, hidden), QUERY_KEY_STD),
        f"{prefix}.self_attn.v_proj.weight": normal(rng, (kv_rows, hidden), WEIGHT_STD),
        f"{prefix}.self_attn.o_proj.weight": normal(rng, (hidden, q_rows), WEIGHT_STD),
        f"{prefix}.mlp.gate_proj.weight": normal(rng, (width, hidden), WEIGHT_STD),
        f"{prefix}.mlp.up_proj.weight": normal(rng, (width, hidden), WEIGHT_STD),
        f"{prefix}.mlp.down_proj.weight": normal(rng, (hidden, width), WEIGHT_STD),
        f"{prefix}.input_layernorm.weight": np.ones(hidden, dtype=np.float32),
        f"{prefix}.post_attention_layernorm.weight": np.ones(hidden, dtype=np.float32),
    }


def random_weights(shape: Shape = TINY, seed: int = SEED) -> dict[str, np.ndarray]:
    """Every tensor, drawn in this fixed order from one generator."""
    rng = np.random.default_rng(seed)
    rows, hidden = shape.vocab_size, shape.hidden_size
    weights = {"model.embed_tokens.weight": normal(rng, (rows, hidden), WEIGHT_STD)}
    for layer in range(shape.layers):
        weights.update(layer_weights(rng, layer, shape))
    weights["model.norm.weight"] = np.ones(hidden, dtype=np.float32)
    if not shape.tie_word_embeddings:
        weights["lm_head.weight"] = normal(rng, (rows, hidden), WEIGHT_STD)
    return weights


# --- GGUF -------------------------------------------------------------------------------------

# Hugging Face's name of a layer's tensor → llama.cpp's (gguf's tensor_mapping for LLAMA).
GGUF_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
GGUF_TOP_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def gguf_name(hf_name: str) -> str:
    if hf_name in GGUF_TOP_NAMES:
        return GGUF_TOP_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)  # model.layers.{i}.{module}.weight
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest.removesuffix('.weight')]}.weight"


def permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: within each head, Hugging Face keeps the two
    rotary halves apart (rotate-half); llama.cpp wants each pair side by side (interleaved)."""
    rows = weights.shape[0]
    halves = weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:])
    return halves.swapaxes(1, 2).reshape(weights.shape)


def gguf_tensor(hf_name: str, weights: np.ndarray) -> np.ndarray:
    # As the converter does: n_head for the queries, n_head_kv for the keys.
    if hf_name.endswith("q_proj.weight"):
        return permute(weights, TINY.heads)
    if hf_name.endswith("k_proj.weight"):
        return permute(weights, TINY.kv_heads)
    return weights


def add_hyperparameters(writer: gguf.GGUFWriter) -> None:
    """The keys convert_hf_to_gguf writes for a Llama (TextModel + LlamaModel parameters), of
    the tiny shape: the only one written as a GGUF."""
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(NAME)
    writer.add_block_count(TINY.layers)
    writer.add_context_length(TINY.max_context)
    writer.add_embedding_length(TINY.hidden_size)
    writer.add_feed_forward_length(TINY.intermediate_size)
    writer.add_head_count(TINY.heads)
    writer.add_head_count_kv(TINY.kv_heads)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_key_length(TINY.head_dim)
    writer.add_value_length(TINY.head_dim)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(VOCAB_SIZE)
    writer.add_rope_dimension_count(TINY.head_dim)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def token_types(tokens: list[str]) -> list[int]:
    special = set(SPECIAL_TOKENS)
    return [
        gguf.TokenType.CONTROL if token in special else gguf.TokenType.NORMAL for token in tokens
    ]


def add_vocab(writer: gguf.GGUFWriter, tokenizer: Tokenizer) -> None:
    """What _set_vocab_gpt2 and SpecialVocab write; "gpt-2", since llama-server refuses "gpt2"."""
    tokens = vocabulary(tokenizer)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types(tokens))
    writer.add_token_merges(merges(tokenizer))
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_eot_token_id(IM_END_ID)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)


@contextmanager
def quiet_gguf_writer() -> Iterator[None]:
    """The writer logs its plan at INFO, which Berth's root logger would print on every run."""
    chatty = logging.getLogger("gguf.gguf_writer")
    level = chatty.level
    chatty.setLevel(logging.WARNING)
    try:
        yield
    finally:
        chatty.setLevel(level)


def write_gguf(path: Path, weights: dict[str, np.ndarray], tokenizer: Tokenizer) -> None:
    with quiet_gguf_writer():
        write_gguf_file(path, weights, tokenizer)


def write_gguf_file(path: Path, weights: dict[str, np.ndarray], tokenizer: Tokenizer) -> None:
    writer = gguf.GGUFWriter(path, "llama")
    add_hyperparameters(writer)
    add_vocab(writer, tokenizer)
    for hf_name, tensor in weights.items():
        # The numpy array goes as is: GGUF lists dims innermost first, so [out, in] is ne=[in, out].
        writer.add_tensor(gguf_name(hf_name), gguf_tensor(hf_name, tensor))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# --- the folder -------------------------------------------------------------------------------


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def json_files(shape: Shape) -> Iterator[tuple[str, dict[str, Any]]]:
    yield CONFIG_FILE, hf_config(shape)
    yield "generation_config.json", generation_config()
    yield "special_tokens_map.json", special_tokens_map()
    yield "tokenizer_config.json", tokenizer_config(shape)


def written_files(shape: Shape) -> list[str]:
    names = [name for name, _ in json_files(shape)] + [TOKENIZER_FILE, SAFETENSORS_FILE]
    return names + ([GGUF_FILE] if shape == TINY else [])


def file_sizes(folder: Path, shape: Shape) -> tuple[tuple[str, int], ...]:
    """The files this module writes, not whatever else the folder holds."""
    return tuple(sorted((name, (folder / name).stat().st_size) for name in written_files(shape)))


def parameter_count(weights: dict[str, np.ndarray]) -> int:
    return sum(int(tensor.size) for tensor in weights.values())


def write_tiny_model(folder: Path, shape: Shape = TINY) -> TinyModel:
    """Write the whole model into `folder` (created if missing; files of the same names
    replaced, others left alone) and say what is there. A GGUF only of the tiny shape."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in json_files(shape):
        write_json(folder / name, data)
    tokenizer = train_tokenizer()
    (folder / TOKENIZER_FILE).write_text(tokenizer.to_str(pretty=True) + "\n")
    weights = random_weights(shape)
    save_file(weights, str(folder / SAFETENSORS_FILE), metadata={"format": "pt"})
    if shape == TINY:
        write_gguf(folder / GGUF_FILE, weights, tokenizer)
    return describe(folder, parameter_count(weights), shape)


def describe(folder: Path, params_total: int, shape: Shape) -> TinyModel:
    return TinyModel(
        folder=folder,
        architecture=ARCHITECTURE,
        layers=shape.layers,
        attention_heads=shape.heads,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        vocab_size=shape.vocab_size,
        max_context=shape.max_context,
        params_total=params_total,
        files=file_sizes(folder, shape),
        safetensors_file=SAFETENSORS_FILE,
        gguf_file=GGUF_FILE if shape == TINY else "",
    )
