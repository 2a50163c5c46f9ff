"""Facts read from each catalog model's upstream config.json equal those in the catalog data.

The fixtures under tests/hub/fixtures/ are the repositories' config.json files as published
(written by hand in the upstream key layout, not generated from the catalog), covering dense,
MoE, MLA (DeepSeek), sliding-window (Gemma 3, gpt-oss), multimodal (text_config) and
encoder-only (XLM-RoBERTa) configs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog.config_facts import ConfigError, read_facts
from catalog.variants import RepoFile, derive_variants, select_files
from tests.hub import FIXTURES, upstream_config

CATALOG = Path(__file__).resolve().parents[2] / "catalog" / "data" / "models.json"
ENTRIES = {entry["repo_id"]: entry for entry in json.loads(CATALOG.read_text())["models"]}
EXACT = [
    "architecture",
    "layers",
    "attention_heads",
    "kv_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "max_context",
    "native_dtype",
    "sliding_window",
    "global_layers",
    "mla",
    "encoder_only",
]


def test_every_catalog_family_has_an_upstream_config_fixture():
    fixtures = {path.stem.replace("--", "/") for path in FIXTURES.glob("*.json")}
    assert fixtures == set(ENTRIES)
    assert {ENTRIES[repo]["family"] for repo in fixtures} == {e["family"] for e in ENTRIES.values()}


@pytest.mark.parametrize("repo_id", sorted(ENTRIES))
def test_the_facts_from_config_json_equal_the_catalogs(repo_id):
    facts = read_facts(upstream_config(repo_id)).as_fields()
    entry = ENTRIES[repo_id]
    assert {key: facts[key] for key in EXACT} == {key: entry[key] for key in EXACT}


@pytest.mark.parametrize("repo_id", sorted(ENTRIES))
def test_parameters_counted_from_the_shapes_are_close_to_the_published_counts(repo_id):
    """Totals within 2 %; the active share of MoE models within 20 %, because publishers
    disagree on whether the embedding lookup counts as active."""
    facts = read_facts(upstream_config(repo_id))
    entry = ENTRIES[repo_id]
    assert facts.params_total == pytest.approx(entry["params_total"], rel=0.02)
    assert facts.params_active == pytest.approx(entry["params_active"], rel=0.2)


def test_moe_models_activate_a_fraction_and_dense_models_all_of_their_parameters():
    moe = read_facts(upstream_config("Qwen/Qwen3-30B-A3B"))
    dense = read_facts(upstream_config("Qwen/Qwen3-8B"))
    assert moe.params_active < moe.params_total / 5
    assert dense.params_active == dense.params_total


def test_deepseek_caches_one_latent_per_layer():
    facts = read_facts(upstream_config("deepseek-ai/DeepSeek-V3"))
    assert (facts.kv_heads, facts.head_dim) == (1, 576)
    assert facts.mla == {"kv_lora_rank": 512, "qk_rope_head_dim": 64}
    assert facts.quantization == "fp8"


def test_gemma_reads_its_text_config_and_transformers_defaults():
    facts = read_facts(upstream_config("google/gemma-3-27b-it"))
    assert (facts.vocab_size, facts.max_context) == (262208, 131072)  # not in the file
    assert (facts.sliding_window, facts.global_layers) == (1024, 10)  # every 6th layer global


def test_qwen2_ships_a_sliding_window_it_switches_off():
    config = upstream_config("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
    assert config["sliding_window"] == 4096
    assert read_facts(config).sliding_window is None
    assert read_facts({**config, "use_sliding_window": True}).global_layers == 0


def test_layer_types_count_the_full_attention_layers():
    config = upstream_config("openai/gpt-oss-20b")
    assert read_facts(config).global_layers == 12
    all_full = {**config, "layer_types": ["full_attention"] * 24}
    assert read_facts(all_full).sliding_window is None


def test_an_encoder_keeps_no_kv_cache_and_loses_its_padding_positions():
    facts = read_facts(upstream_config("BAAI/bge-m3"))
    assert facts.encoder_only and facts.max_context == 8192  # 8194 positions - pad 1 - 1


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda c: c.pop("num_hidden_layers"), "config.json has no num_hidden_layers"),
        (lambda c: c.update(num_attention_heads=0), "num_attention_heads must be a positive"),
        (lambda c: c.update(hidden_size="4096"), "hidden_size must be a positive whole number"),
        (lambda c: c.update(architectures=[]), "config.json names no architecture"),
        (lambda c: c.pop("max_position_embeddings"), "max_position_embeddings must be"),
    ],
)
def test_a_config_without_what_placement_needs_says_what_is_missing(change, message):
    config = upstream_config("Qwen/Qwen3-8B")
    change(config)
    with pytest.raises(ConfigError, match=message):
        read_facts(config)


def test_a_config_that_is_not_an_object_is_refused():
    with pytest.raises(ConfigError, match="not a JSON object"):
        read_facts(["Qwen3ForCausalLM"])  # type: ignore[arg-type]


# --- variants from files ---------------------------------------------------------------------


def test_variants_come_from_the_files_with_their_engine_and_precision():
    files = [
        RepoFile("config.json", 700),
        RepoFile("model-00001-of-00002.safetensors", 5_000),
        RepoFile("model-00002-of-00002.safetensors", 3_000),
        RepoFile("consolidated.safetensors", 8_000),  # Mistral's own copy: not counted
        RepoFile("Tiny-Q4_K_M.gguf", 2_000),
        RepoFile("big/Tiny-Q8_0-00001-of-00002.gguf", 1_500),
        RepoFile("big/Tiny-Q8_0-00002-of-00002.gguf", 1_500),
        RepoFile("mmproj-F16.gguf", 100),
    ]
    config = upstream_config("openai/gpt-oss-20b")
    specs = {s.name: s for s in derive_variants("acme/x", files, config, "bfloat16")}
    assert set(specs) == {"mxfp4", "gguf-q4_k_m", "gguf-q8_0"}
    assert (specs["mxfp4"].engine, specs["mxfp4"].size_bytes) == ("vllm", 8_000)
    assert specs["mxfp4"].min_compute_capability == "8.0"
    assert (specs["gguf-q8_0"].engine, specs["gguf-q8_0"].size_bytes) == ("llamacpp", 3_000)
    chosen = select_files("gguf", specs["gguf-q8_0"].gguf_file, files)
    assert [f.path for f in chosen] == [
        "big/Tiny-Q8_0-00001-of-00002.gguf",
        "big/Tiny-Q8_0-00002-of-00002.gguf",
    ]


@pytest.mark.parametrize(
    "quant,name,precision,capability",
    [
        ({}, "bf16", "bf16", "8.0"),
        ({"quant_method": "fp8"}, "fp8", "fp8", "8.9"),
        ({"quant_method": "awq", "bits": 4}, "awq-int4", "int4", "7.5"),
        ({"quant_method": "gptq", "bits": 8}, "gptq-int8", "int8", "7.5"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "fp8",
            "fp8",
            "8.9",
        ),
    ],
)
def test_a_safetensors_variant_is_named_by_its_quantization(quant, name, precision, capability):
    config = {"quantization_config": quant} if quant else {}
    (spec,) = derive_variants("acme/x", [RepoFile("model.safetensors", 10)], config, "bfloat16")
    assert (spec.name, spec.precision, spec.min_compute_capability) == (name, precision, capability)
