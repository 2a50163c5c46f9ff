"""Variants from a repository's files: which weights it holds, their format, size and engine.

Pure Python (no Django, no I/O), shared by "add from the hub", "add from a path" and the
download, which fetches exactly the files `select_files` names for a variant.
GGUF files run on llama.cpp (`llama-server`); safetensors run on vLLM.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GGUF = "gguf"
SAFETENSORS = "safetensors"
ENGINE_BY_FORMAT = {GGUF: "llamacpp", SAFETENSORS: "vllm"}
# The oldest GPUs each precision runs on in vLLM (bf16 needs Ampere, fp8 Ada/Hopper).
MIN_COMPUTE_CAPABILITY = {
    "bf16": "8.0",
    "fp16": "7.0",
    "fp32": "7.0",
    "fp8": "8.9",
    "int8": "7.5",
    "int4": "7.5",
    "mxfp4": "8.0",
}
DTYPE_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# Files an engine reads beside the weights: config, tokenizer, chat template (top level only).
AUX_SUFFIXES = (".json", ".model", ".txt", ".jinja", ".tiktoken")
SPLIT_GGUF = re.compile(r"^(?P<stem>.+?)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$")
GGUF_QUANT = re.compile(r"(IQ\d_[A-Z0-9]+|Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4)", re.IGNORECASE)


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int


@dataclass(frozen=True)
class VariantSpec:
    name: str
    precision: str
    format: str
    repo_id: str
    gguf_file: str
    size_bytes: int
    engine: str
    min_compute_capability: str


def is_top_level(path: str) -> bool:
    return "/" not in path


def safetensors_weights(files: Iterable[RepoFile]) -> list[RepoFile]:
    """The safetensors files vLLM loads. Mistral repositories also ship a consolidated copy
    for their own tools; counting both would double the size and the download."""
    found = [f for f in files if f.path.endswith(".safetensors") and "/" not in f.path]
    sharded = [f for f in found if not f.path.startswith("consolidated")]
    return sharded or found


def gguf_groups(files: Iterable[RepoFile]) -> dict[str, list[RepoFile]]:
    """GGUF files by model: split files (-00001-of-00003) together, projectors left out."""
    groups: dict[str, list[RepoFile]] = {}
    for f in files:
        name = f.path.rsplit("/", 1)[-1]
        if not name.endswith(".gguf") or name.lower().startswith("mmproj"):
            continue
        split = SPLIT_GGUF.match(f.path)
        key = split.group("stem") if split else f.path.removesuffix(".gguf")
        groups.setdefault(key, []).append(f)
    return {key: sorted(parts, key=lambda f: f.path) for key, parts in groups.items()}


def gguf_quant(stem: str) -> str:
    found = GGUF_QUANT.findall(stem.rsplit("/", 1)[-1])
    return found[-1].lower() if found else stem.rsplit("/", 1)[-1].lower()[-24:]


def quantized_precision(quant: dict[str, Any]) -> tuple[str, str]:
    """(variant name, precision) of a quantized checkpoint."""
    method = str(quant.get("quant_method", "")).lower()
    bits = int(quant.get("bits") or quant.get("w_bit") or 4)
    if method in ("fp8", "fbgemm_fp8") or quant.get("fmt") == "e4m3":
        return "fp8", "fp8"
    if method == "mxfp4":
        return "mxfp4", "mxfp4"
    if method in ("awq", "gptq"):
        return f"{method}-int{bits}", f"int{bits}"
    if method == "compressed-tensors":
        return compressed_tensors_precision(quant)
    if method == "bitsandbytes":
        precision = "int4" if quant.get("load_in_4bit") else "int8"
        return f"bnb-{precision}", precision
    return method or "quantized", method or "quantized"


def compressed_tensors_precision(quant: dict[str, Any]) -> tuple[str, str]:
    groups = quant.get("config_groups") or {}
    weights = next(iter(groups.values()), {}).get("weights", {}) if groups else {}
    bits, kind = int(weights.get("num_bits") or 8), weights.get("type", "float")
    if kind == "float" and bits == 8:
        return "fp8", "fp8"
    return f"int{bits}", f"int{bits}"


def safetensors_precision(config: dict[str, Any], native_dtype: str) -> tuple[str, str]:
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant:
        return quantized_precision(quant)
    precision = DTYPE_PRECISION.get(native_dtype, "bf16")
    return precision, precision


def safetensors_variant(
    repo_id: str, files: list[RepoFile], config: dict[str, Any], native_dtype: str
) -> VariantSpec | None:
    weights = safetensors_weights(files)
    if not weights:
        return None
    name, precision = safetensors_precision(config, native_dtype)
    return VariantSpec(
        name=name,
        precision=precision,
        format=SAFETENSORS,
        repo_id=repo_id,
        gguf_file="",
        size_bytes=sum(f.size for f in weights),
        engine=ENGINE_BY_FORMAT[SAFETENSORS],
        min_compute_capability=MIN_COMPUTE_CAPABILITY.get(precision, ""),
    )


def gguf_variants(repo_id: str, files: list[RepoFile]) -> list[VariantSpec]:
    specs = []
    for stem, parts in gguf_groups(files).items():
        quant = gguf_quant(stem)
        specs.append(
            VariantSpec(
                name=f"gguf-{quant}"[:40],
                precision=quant[:16],
                format=GGUF,
                repo_id=repo_id,
                gguf_file=parts[0].path,
                size_bytes=sum(f.size for f in parts),
                engine=ENGINE_BY_FORMAT[GGUF],
                min_compute_capability="",  # llama.cpp also runs on CPUs
            )
        )
    return unique_names(specs)


def unique_names(specs: list[VariantSpec]) -> list[VariantSpec]:
    """Two GGUF files with one quant name (e.g. in two folders) get numbered names."""
    seen: dict[str, int] = {}
    result = []
    for spec in specs:
        seen[spec.name] = seen.get(spec.name, 0) + 1
        if seen[spec.name] > 1:
            spec = VariantSpec(**{**spec.__dict__, "name": f"{spec.name}-{seen[spec.name]}"})
        result.append(spec)
    return result


def derive_variants(
    repo_id: str, files: list[RepoFile], config: dict[str, Any], native_dtype: str
) -> list[VariantSpec]:
    """Every variant the files hold: one for the safetensors, one per GGUF model."""
    found = gguf_variants(repo_id, files)
    safetensors = safetensors_variant(repo_id, files, config, native_dtype)
    return ([safetensors] if safetensors else []) + found


def select_files(fmt: str, gguf_file: str, files: Iterable[RepoFile]) -> list[RepoFile]:
    """The files a variant's download fetches (and nothing the engine would not read)."""
    files = list(files)
    if fmt == GGUF:
        split = SPLIT_GGUF.match(gguf_file)
        if split is None:
            return [f for f in files if f.path == gguf_file]
        stem = split.group("stem")
        return [f for f in files if (m := SPLIT_GGUF.match(f.path)) and m.group("stem") == stem]
    aux = [f for f in files if is_top_level(f.path) and f.path.endswith(AUX_SUFFIXES)]
    return aux + safetensors_weights(files)
