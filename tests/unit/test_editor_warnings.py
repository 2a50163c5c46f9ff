"""The editor's checks before Save: each warning appears for its cause and not otherwise, the
memory share is capped at what the copy's size allows, the presets change only the settings they
are about, and the suggestions say why. Models and variants come from the catalog's data file
(unsaved rows: these checks need no database)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog.models import Model, Variant
from deployments.engine import presets, suggestions
from deployments.engine.context import EngineContext
from deployments.engine.warnings import cap_share, warnings_for

CATALOG_FILE = Path(__file__).resolve().parents[2] / "catalog" / "data" / "models.json"
H100 = 81559 * 2**20
MODEL_FIELDS = {f.name for f in Model._meta.fields} - {"id", "added_at"}


def catalog_model(repo_id: str, variant: str = "") -> tuple[Model, Variant]:
    entry = next(
        m for m in json.loads(CATALOG_FILE.read_text())["models"] if m["repo_id"] == repo_id
    )
    model = Model(**{k: v for k, v in entry.items() if k in MODEL_FIELDS})
    raw = next(v for v in entry["variants"] if v["name"] == variant or not variant)
    chosen = Variant(
        model=model,
        name=raw["name"],
        precision=raw["precision"],
        format=raw["format"],
        repo_id=raw["repo_id"],
        size_bytes=raw["bytes"],
        engine=raw["engine"],
        min_compute_capability=raw["min_compute_capability"] or "",
    )
    return model, chosen


def context(repo_id: str = "Qwen/Qwen3-8B", size: float = 1.0, version: str = "0.32.0"):
    model, variant = catalog_model(repo_id)
    return EngineContext(model, variant, version, size, H100, "NVIDIA-H100-80GB-HBM3")


def codes(settings, where=None):
    return [w.code for w in warnings_for(settings, where or context())]


FINE = {"max_model_len": 8192}
CAUSES = [
    ("context_beyond_model", {"max_model_len": 65536}, context()),
    (
        "context_beyond_memory",
        {"max_model_len": 131072},
        context("meta-llama/Llama-3.1-8B-Instruct", size=0.5),
    ),
    ("share_above_95", {**FINE, "gpu_memory_utilization": 0.97}, context()),
    ("tool_format_without_tool_calling", {**FINE, "tool_call_parser": "hermes"}, context()),
    ("tool_calling_without_format", {**FINE, "enable_auto_tool_choice": True}, context()),
]


def test_settings_that_will_start_get_no_warning():
    assert codes(FINE) == []
    assert codes({**FINE, "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}) == []
    assert codes({**FINE, "gpu_memory_utilization": 0.95}) == []
    assert codes({}, context("meta-llama/Llama-3.1-8B-Instruct", size=1)) == []


@pytest.mark.parametrize("code,given,where", CAUSES, ids=[c[0] for c in CAUSES])
def test_each_warning_appears_for_its_cause_only(code, given, where):
    assert codes(given, where) == [code]


def test_a_conversation_longer_than_the_model_says_the_models_own_length():
    (warning,) = warnings_for({"max_model_len": 65536}, context())
    assert warning.setting == "max_model_len"
    assert warning.message == (
        "A conversation of 65,536 tokens is longer than Qwen3 8B supports (40,960 tokens): vLLM "
        "will not start. Use 40,960 or less."
    )


def test_a_conversation_longer_than_fits_says_the_longest_that_fits():
    where = context("meta-llama/Llama-3.1-8B-Instruct", size=0.5)
    longest = where.largest_context({"max_model_len": 131072})
    assert 0 < longest < 131072
    (warning,) = warnings_for({"max_model_len": 131072}, where)
    assert f"at most {longest:,} tokens fit" in warning.message
    assert "31.86 GiB the engine of one copy may use" in warning.message
    assert codes({"max_model_len": longest}, where) == []


def test_a_model_that_does_not_fit_at_all_says_so():
    (warning,) = warnings_for({}, context("Qwen/Qwen3-32B", size=0.25))
    assert warning.code == "context_beyond_memory"
    assert "does not fit" in warning.message and "even with a short conversation" in warning.message


@pytest.mark.parametrize(
    "size,asked,kept,said",
    [
        (0.5, 0.40, 0.40, ""),
        (0.5, 0.45, 0.45, ""),
        (0.5, 0.60, 0.45, "capped at 45.0%"),
        (0.25, 0.9, 0.225, "capped at 22.5%"),
        (1.0, 0.97, 0.97, ""),
        (2.0, 1.0, 1.0, ""),
    ],
)
def test_the_memory_share_can_be_lowered_and_is_capped_above_its_limit(size, asked, kept, said):
    value, why = cap_share(asked, context(size=size))
    assert value == pytest.approx(kept)
    assert (said in why) if said else why == ""


def test_the_share_default_is_four_fifths_of_the_copys_share():
    assert context(size=0.5).default_share() == 0.4
    assert context(size=1).default_share() == 0.8
    assert context(size=0.5).share({"gpu_memory_utilization": 0.9}) == 0.45


OTHER = {"enable_auto_tool_choice": True, "tool_call_parser": "hermes", "other_flags": "--seed 1"}


@pytest.mark.parametrize("key", list(presets.PRESETS))
def test_each_preset_changes_only_the_settings_it_is_about(key):
    where = context("meta-llama/Llama-3.1-8B-Instruct", size=0.5)
    before = {
        **OTHER,
        "max_model_len": 1000,
        "max_num_seqs": 7,
        "kv_cache_dtype": "fp8_e5m2",
        "enable_prefix_caching": False,
        "enable_chunked_prefill": False,
        "enforce_eager": False,
        "max_num_batched_tokens": 999,
    }
    after = presets.apply(key, before, where)
    about = set(presets.PRESETS[key].about)
    assert set(presets.changed(before, after)) <= about
    assert presets.changed(before, after)  # it is about something
    for name, value in before.items():
        if name not in about:
            assert after[name] == value


def test_presets_tune_for_what_they_say():
    where = context("meta-llama/Llama-3.1-8B-Instruct", size=1)
    assert presets.apply("low_memory", {}, where) == {
        "max_model_len": 4096,
        "kv_cache_dtype": "fp8",
        "max_num_seqs": 64,
        "enforce_eager": True,
    }
    assert presets.apply("many_users", {}, where) == {"max_num_seqs": 512, "max_model_len": 8192}
    assert presets.apply("balanced", {"max_num_seqs": 9}, where) == {"max_model_len": 32768}
    long = presets.apply("long_documents", {}, where)
    assert long["kv_cache_dtype"] == "fp8" and long["max_model_len"] == 131072


def test_a_preset_keeps_the_longest_conversation_within_one_copys_memory():
    where = context("meta-llama/Llama-3.1-8B-Instruct", size=0.333)
    tuned = presets.apply("long_documents", {}, where)
    assert 4096 < tuned["max_model_len"] < 131072
    assert codes(tuned, where) == []
    assert presets.matching(tuned, where) == "long_documents"


def test_suggestions_come_from_the_recipe_when_the_model_has_one():
    found = {s.setting: s for s in suggestions.suggest(context("Qwen/Qwen3-8B"))}
    assert found["tool_call_parser"].value == "hermes"
    assert found["reasoning_parser"].value == "qwen3"
    assert "vLLM's recipe for Qwen/Qwen3-8B" in found["tool_call_parser"].why


def test_suggestions_come_from_the_family_rules_otherwise():
    found = {
        s.setting: s for s in suggestions.suggest(context("mistralai/Mistral-7B-Instruct-v0.3"))
    }
    assert found["tool_call_parser"].value == "mistral"
    assert "the rule for the Mistral family" in found["tool_call_parser"].why
    assert suggestions.suggested_settings(context("BAAI/bge-m3")) == {"runner": "pooling"}


def test_a_parser_the_version_lacks_is_not_suggested():
    newest = context("openai/gpt-oss-20b", version="0.32.0")
    assert suggestions.suggested_settings(newest)["tool_call_parser"] == "openai"


def test_a_context_that_does_not_fit_is_suggested_shorter_with_why():
    where = context("meta-llama/Llama-3.1-8B-Instruct", size=0.5)
    (memory,) = [s for s in suggestions.suggest(where) if s.setting == "max_model_len"]
    assert memory.value == 65536
    assert memory.why.startswith("The model's full 131,072 tokens do not fit")
